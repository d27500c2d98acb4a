-- waiters.lua: how many owners wait for the lock, by sorted sets of waiting owners whose
-- scores are when each one's interest lapses (ms on the server clock): the core lock's
-- waiting set (acquire_waiting.lua) and, for a fair lock, its queue timeouts (fair_acquire.lua).
-- KEYS: the sorted sets (one hash tag); ARGV[1] an owner not to count (the holder's)
-- Returns the number of entries, other than ARGV[1]'s, whose interest has not lapsed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for i = 1, #KEYS do
  n = n + redis.call('ZCOUNT', KEYS[i], '(' .. now, '+inf')
  local mine = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if mine and tonumber(mine) > now then
    n = n - 1
  end
end
return n
