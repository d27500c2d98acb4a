-- semaphore_renew.lua: extend a permit's lease if it is still held and not expired.
-- KEYS[1] permits zset, KEYS[2] order zset, KEYS[3] ticket counter
-- ARGV[1] permit id, ARGV[2] lease in ms
-- Returns 1 when extended, 0 when the permit expired or is gone (it is then removed).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  for i = 1, 3 do -- as semaphore_acquire.lua: lengthened, never shortened
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[2])
    end
  end
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 0
