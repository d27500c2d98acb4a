-- takeover.lua: acquire_waiting.lua for a waiter that asked for takeover (WithTakeover) and
-- found that the process of the lock's holder is dead (its process key is gone: heartbeat.go).
-- The holder is evicted only if it is still the owner the waiter saw, and in the same script
-- that then makes the waiter's attempt, so that the lock goes to the waiter that checked, never
-- to a caller that did not ask for takeover.
-- KEYS[1..4], ARGV[1..5] as acquire_waiting.lua; ARGV[6] the holder seen dead
-- Returns acquire.lua's reply.
if redis.call('HEXISTS', KEYS[1], ARGV[6]) == 1 then
  redis.call('DEL', KEYS[1])
end
local function attempt()
--#include acquire_waiting.lua
end
return attempt()
