-- takeover_fair.lua: fair_acquire.lua for a fair waiter that asked for takeover
-- (WithTakeover) and found dead processes among the lock's holder and the first owners of its
-- queue (their process keys are gone: heartbeat.go). Each is evicted only if it is still where
-- the waiter saw it, in the same script that then makes the waiter's attempt: the lock goes to
-- the head of the queue left, as fair_acquire.lua decides, never to a caller that overtakes it.
-- KEYS[1..5], ARGV[1..7] as fair_acquire.lua; ARGV[8] the holder seen dead, or '';
-- ARGV[9..] queued owners seen dead
-- Returns fair_acquire.lua's reply.
if ARGV[8] ~= '' and redis.call('HEXISTS', KEYS[1], ARGV[8]) == 1 then
  redis.call('DEL', KEYS[1])
end
for i = 9, #ARGV do
  if redis.call('ZREM', KEYS[5], ARGV[i]) == 1 then
    redis.call('LREM', KEYS[4], 1, ARGV[i])
  end
end
local function attempt()
--#include fair_acquire.lua
end
return attempt()
