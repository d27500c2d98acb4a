-- semaphore_acquire.lua: take one of N permits. The fair semaphore of "Redis in Action"
-- (6.3.2): a sorted set of permit ids scored by expiry plus one scored by a ticket from a
-- counter, whose rank decides. Time is the server's (TIME), never a client's, so a client
-- with a skewed clock can neither steal a permit nor expire another's early.
-- KEYS[1] permits zset (permit id -> expiry, ms on the server clock)
-- KEYS[2] order zset (permit id -> ticket), KEYS[3] ticket counter, KEYS[4] the permit id's
-- tombstone (P{K}:sem:gone:<id>), left by the clean-up of a call whose reply was lost
-- ARGV[1] permit id, ARGV[2] lease in ms, ARGV[3] number of permits
-- Returns {1, 0} when a permit was taken, {0, ms} when all are held (ms: until the first
-- held permit expires), {-1, 0} when the id's tombstone exists: its caller gave up and cleaned
-- up before this call reached Redis (late, on another connection), so nothing is taken, or
-- the permit would be held by nobody until its lease ends.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {-1, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #expired do -- permits of holders that stopped renewing come back
  redis.call('ZREM', KEYS[2], expired[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ticket = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZADD', KEYS[2], ticket, ARGV[1])
if redis.call('ZRANK', KEYS[2], ARGV[1]) < tonumber(ARGV[3]) then
  for i = 1, 3 do -- the keys outlive every permit (a shorter lease never shortens them)
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[2])
    end
  end
  return {1, 0}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
