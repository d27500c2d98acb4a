-- release.lua: compare-and-delete. Only the owner releases; a re-entered lock is decremented,
-- and the last release deletes the key and wakes the waiters.
-- KEYS[1] lock hash; ARGV[1] owner token; ARGV[2] release channel;
-- ARGV[3] "1" to drop every hold of the owner at once (clean-up after a loss or a lost reply)
-- Returns the holds left (0 = deleted), or -1 when the lock is not ours.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if ARGV[3] ~= '1' then
  local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if left > 0 then
    return left
  end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 0
