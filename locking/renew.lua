-- renew.lua: extend the lease if the lock is still ours.
-- KEYS[1] lock hash; ARGV[1] owner token; ARGV[2] lease in ms
-- Returns 1 when extended, 0 when the lock is gone or owned by another.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
