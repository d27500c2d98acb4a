-- acquire_waiting.lua: acquire.lua for an Obtain that waits when the lock is taken. It records
-- the caller's interest, so that the holder can ask whether anyone waits (waiters.lua,
-- Lock.Waiters): a failed attempt adds the owner to the waiting set, due to lapse a little
-- after the holder's remaining lease (ARGV[5] ms later), when the waiter tries again and renews
-- it; a successful one removes it. Entries past their time (a waiter that died) are dropped.
-- KEYS[1..3] as acquire.lua, KEYS[4] the waiting set (sorted set: owner -> when its interest
-- lapses, ms on the server clock)
-- ARGV[1..4] as acquire.lua (ARGV[4] "0": a first acquire), ARGV[5] the margin in ms
-- Returns acquire.lua's reply.
local function take()
--#include acquire.lua
end

local r = take()
if r[1] == 1 then
  redis.call('ZREM', KEYS[4], ARGV[1])
elseif r[1] == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local left = tonumber(r[2])
  if left < 0 then
    left = tonumber(ARGV[2])
  end
  local keep = left + tonumber(ARGV[5])
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  redis.call('ZADD', KEYS[4], now + keep, ARGV[1])
  if redis.call('PTTL', KEYS[4]) < keep then
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
return r
