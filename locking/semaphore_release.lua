-- semaphore_release.lua: give a permit back and wake a waiter.
-- KEYS[1] permits zset, KEYS[2] order zset; ARGV[1] permit id, ARGV[2] release channel
-- KEYS[3] (clean-up only) the id's tombstone, set for ARGV[3] ms (one lease): an acquire of
-- this id that reaches Redis later takes nothing (see semaphore_acquire.lua)
-- Returns 0 when released, -1 when the permit had expired or was gone.
if KEYS[3] then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
end
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
