-- waiters.lua: how many owners wait for the lock, by a sorted set of waiting owners whose
-- scores are when each one's interest lapses (ms on the server clock): the core lock's
-- waiting set (acquire_waiting.lua) or the fair lock's queue timeouts (fair_acquire.lua).
-- KEYS[1] the sorted set; ARGV[1] an owner not to count (the holder's)
-- Returns the number of owners, other than ARGV[1], whose interest has not lapsed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if n > 0 and redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local mine = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  if mine > now then
    n = n - 1
  end
end
return n
