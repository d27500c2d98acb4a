-- refence.lua: issue a new fencing token to the lock's holder, without letting go of the lock.
-- KEYS[1] lock hash; KEYS[2] fencing counter; ARGV[1] owner token
-- Returns the new token (the counter, incremented), or -1 when the lock is not ours any more
-- (nothing is issued).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('INCR', KEYS[2])
end
return -1
