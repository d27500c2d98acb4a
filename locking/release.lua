-- release.lua: compare-and-delete. Only the owner releases. The process counts the handles of
-- a re-entered lock and is the authority on them: an inner release only decrements, never
-- below one hold (the count may be off by a re-entry whose reply was lost, and an inner
-- release must not free a lock the process still holds); the last release (ARGV[3] = "1")
-- drops every hold of the owner at once, deletes the key and wakes the waiters.
-- KEYS[1] lock hash; ARGV[1] owner token; ARGV[2] release channel;
-- ARGV[3] "1" to drop every hold of the owner at once (the last release, or clean-up after a
-- loss or a lost reply), anything else to give up one inner hold
-- Returns the holds left (0 = deleted), or -1 when the lock is not ours.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if ARGV[3] ~= '1' then
  if tonumber(redis.call('HGET', KEYS[1], ARGV[1])) > 1 then
    return redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  end
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 0
