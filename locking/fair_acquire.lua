-- fair_acquire.lua: take a fair (FIFO) lock, or join or keep a place in its queue. The lock
-- itself is the core lock's hash and fencing counter (acquire.lua, included below as take):
-- the queue only decides whose turn it is, as Redisson's RedissonFairLock does.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] the owner's tombstone (see acquire.lua
-- and fair_release.lua), KEYS[4] queue (list of owners, oldest first), KEYS[5] queue
-- timeouts (sorted set: owner -> when its place lapses, ms on the server clock)
-- ARGV[1] owner, ARGV[2] lease in ms, ARGV[3] token floor, ARGV[4] "0" (see acquire.lua),
-- ARGV[5] "1" to try only (never queue), ARGV[6] queue timeout in ms,
-- ARGV[7] prefix of the waiters' channels (channel = prefix .. owner)
-- Returns {1, token} when taken, {0, ms} when not: ms is at most how long to wait (the
-- holder's remaining lease, or how long the head waiter keeps its turn); {-2, 0} when the
-- owner's tombstone exists (it left and cleaned up before this call arrived): neither the
-- lock nor a place in the queue is taken.
local function take()
--#include acquire.lua
end

if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-2, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Waiters that stopped refreshing their place (crashed, gone) are dropped.
local stale = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
for i = 1, #stale do
  redis.call('LREM', KEYS[4], 1, stale[i])
end
if #stale > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return take() -- an earlier run of this call took the lock (a retry): its token
end
local head = redis.call('LINDEX', KEYS[4], 0)
local free = redis.call('EXISTS', KEYS[1]) == 0
if free and (not head or head == ARGV[1]) then
  if head then
    redis.call('LPOP', KEYS[4])
    redis.call('ZREM', KEYS[5], ARGV[1])
  end
  return take()
end
if free then -- the head's turn: wake it, in case it missed its message
  redis.call('PUBLISH', ARGV[7] .. head, '1')
end
if ARGV[5] ~= '1' then -- join the queue, or refresh our place in it
  if redis.call('ZADD', KEYS[5], now + tonumber(ARGV[6]), ARGV[1]) == 1 then
    redis.call('RPUSH', KEYS[4], ARGV[1])
  end
  -- The queue outlives every place in it: a Client with a shorter queue timeout (another
  -- lease) never shortens the TTL that a longer place needs.
  for i = 4, 5 do
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[6]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[6])
    end
  end
end
if free then
  return {0, tonumber(redis.call('ZSCORE', KEYS[5], head)) - now}
end
return {0, redis.call('PTTL', KEYS[1])}
