-- semaphore_release.lua: give a permit back and wake a waiter.
-- KEYS[1] permits zset, KEYS[2] order zset; ARGV[1] permit id, ARGV[2] release channel
-- Returns 0 when released, -1 when the permit had expired or was gone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then
  return -1
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
if tonumber(exp) > now then
  return 0
end
return -1
