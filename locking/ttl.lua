-- ttl.lua: the remaining lease of a lock if it is still ours.
-- KEYS[1] lock hash; ARGV[1] owner token
-- Returns the PTTL in ms, or -3 when the lock is gone or owned by another.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PTTL', KEYS[1])
end
return -3
