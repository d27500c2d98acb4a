-- takeover_semaphore.lua: semaphore_acquire.lua for a WithTakeover waiter that found permits of
-- dead processes (their process keys are gone: heartbeat.go): those permits are taken back
-- first (a permit protects no data), then the attempt runs.
-- KEYS[1..4], ARGV[1..3] as semaphore_acquire.lua; ARGV[4..] the permit ids seen dead
for i = 4, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[2], ARGV[i])
  end
end
local function attempt()
--#include semaphore_acquire.lua
end
return attempt()
