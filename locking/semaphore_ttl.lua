-- semaphore_ttl.lua: the remaining lease of a permit.
-- KEYS[1] permits zset; ARGV[1] permit id
-- Returns the ms left, or -3 when the permit expired or is gone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then
  return tonumber(exp) - now
end
return -3
