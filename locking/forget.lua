-- forget.lua: the clean-up of an owner that gave up: after a call whose reply was lost (the
-- call may have run, or may still be on its way to Redis on another connection), or after a
-- loss. It drops every hold of the owner (release.lua's last release, included below) and
-- leaves a tombstone for the owner, for one lease, which acquire.lua honours: an acquire of
-- this owner that reaches Redis after the clean-up takes nothing. Owners are never reused.
-- KEYS[1] lock hash, KEYS[2] the owner's tombstone (P{K}:gone:<owner>, same hash tag)
-- ARGV[1] owner, ARGV[2] release channel, ARGV[3] "1", ARGV[4] lease in ms
-- Returns release.lua's result.
local function release()
--#include release.lua
end

redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
return release()
