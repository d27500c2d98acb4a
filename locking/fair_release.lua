-- fair_release.lua: release a fair lock (release.lua, included below) and wake the waiter at
-- the head of the queue only; or take a waiter out of the queue. The core lock (Obtain,
-- ObtainMany) releases and cleans up through it too, so that a fair waiter queued behind a
-- plain holder is woken when that holder lets go.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] queue timeouts, KEYS[4] (clean-up only) the
-- owner's tombstone, set for ARGV[6] ms (one lease) so that an acquire of the owner arriving
-- late takes nothing (see fair_acquire.lua)
-- ARGV[1] owner, ARGV[2] release channel, ARGV[3] "1" to drop every hold (see release.lua),
-- ARGV[4] prefix of the waiters' channels, ARGV[5] "1" to leave: the owner gives up waiting
-- (and drops a hold it may have taken in a call whose reply was lost)
-- Returns release.lua's result (holds left, 0 = deleted, -1 = not ours); 0 when leaving.
local function release()
--#include release.lua
end

local function wake_head()
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then
    return -- nobody queued (a plain lock's release: the common case costs one LINDEX)
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while head do
    local lapses = tonumber(redis.call('ZSCORE', KEYS[3], head) or '0')
    if lapses > now then
      redis.call('PUBLISH', ARGV[4] .. head, '1')
      return
    end
    redis.call('LPOP', KEYS[2]) -- a waiter that stopped refreshing its place
    redis.call('ZREM', KEYS[3], head)
    head = redis.call('LINDEX', KEYS[2], 0)
  end
end

if KEYS[4] then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[6])
end
if ARGV[5] == '1' then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    release()
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    wake_head()
  end
  return 0
end
local left = release()
if left == 0 then
  wake_head()
end
return left
