-- fence_max.lua: raise a fencing counter to a token issued elsewhere (never lower it), so
-- that the next token this node issues is greater. Used by Redlock.
-- KEYS[1] fencing counter; ARGV[1] token
-- Returns the counter after the call.
local last = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local token = tonumber(ARGV[1])
if token > last then
  redis.call('SET', KEYS[1], ARGV[1])
  return token
end
return last
