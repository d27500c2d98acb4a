package locking

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts run with EVALSHA and fall back to EVAL when Redis does not know them yet (a
// fresh or restarted server): redis.Script.Run does both.
var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed acquire_waiting.lua
	acquireWaitingLua    string
	acquireWaitingScript = redis.NewScript(include(acquireWaitingLua, "acquire.lua", acquireLua))

	//go:embed waiters.lua
	waitersLua    string
	waitersScript = redis.NewScript(waitersLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed forget.lua
	forgetLua    string
	forgetScript = redis.NewScript(include(forgetLua, "release.lua", releaseLua))

	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)

	//go:embed ttl.lua
	ttlLua    string
	ttlScript = redis.NewScript(ttlLua)

	//go:embed takeover.lua
	takeoverLua    string
	takeoverScript = redis.NewScript(include(takeoverLua, "acquire_waiting.lua", include(acquireWaitingLua, "acquire.lua", acquireLua)))

	//go:embed refence.lua
	refenceLua    string
	refenceScript = redis.NewScript(refenceLua)
)

// include inserts body, the text of the script file name, at the "--#include name" line of
// script: the fair scripts include the core scripts so that the lock itself is taken and
// released by the same code.
func include(script, name, body string) string {
	line := "--#include " + name
	if !strings.Contains(script, line) {
		panic("locking: script lacks " + line)
	}
	return strings.Replace(script, line, body, 1)
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
