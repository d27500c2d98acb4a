-- acquire.lua: take a lock if free, or re-enter it, and issue its fencing token.
-- KEYS[1] lock hash (field = owner token, value = hold count)
-- KEYS[2] fencing counter (a plain integer: the last token issued)
-- KEYS[3] the owner's tombstone (KeysOf: P{K}:gone:<owner>), left by forget.lua; needed
-- only for a first acquire
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] token floor,
-- ARGV[4] "1" to re-enter only (the caller already holds the lock under ARGV[1])
-- Returns {1, token} when taken ({1, 0} on re-entry), {0, pttl} when held by another,
-- {-1, 0} when re-entry finds the lock no longer ours, {-2, 0} when the owner's tombstone
-- exists: the owner gave up and cleaned up (forget.lua) before this call reached Redis (it
-- came late, on another connection), so it must take nothing, or the lock would stay with
-- nobody until its lease ends.
-- Idempotent for a first acquire: if the owner already holds the key, an earlier run of this
-- very call took it (a client retry after the reply was lost; owners are never reused), and
-- the answer is the token it issued (the counter: nobody else acquired since).
if ARGV[4] == '1' then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 0}
  end
  return {-1, 0}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-2, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- token = max(counter, floor) + 1, in one INCR when the counter is ahead of the floor
  local token = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[3])
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], token)
  end
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
end
return {0, redis.call('PTTL', KEYS[1])}
