package fault

import (
	"github.com/stockguard/stockguard/internal/storeapi"
)

// Class is how a strategy stands up to the faults, learned from what the server says
// of it (GET /api/strategies: safe, takes_lock, demo_only, redis_key_prefix), never from its
// name.
type Class string

// The strategy classes.
const (
	// ClassSafe never oversells, even when a lock is lost (the server's safe).
	ClassSafe Class = "safe"
	// ClassLock takes the storefront's own lock, whose watchdog renews the lease and declares
	// its loss, and writes without a guard: it holds unless the lock is lost unnoticed.
	ClassLock Class = "lock"
	// ClassDemoLock takes one of the demo's broken locks (no watchdog): it holds only when
	// nothing goes wrong.
	ClassDemoLock Class = "demo lock"
	// ClassMirror takes no lock and sells from a copy of the stock kept in Redis under its own
	// keys: it holds unless Redis loses its latest writes.
	ClassMirror Class = "redis stock"
	// ClassUnprotected has nothing that holds across processes: it may oversell in any
	// setting (in one process some of these hold, which the server does not tell apart).
	ClassUnprotected Class = "unprotected"
)

// ClassOf returns the class of the strategy the server describes as s.
func ClassOf(s storeapi.Strategy) Class {
	switch {
	case s.Safe:
		return ClassSafe
	case s.TakesLock && s.DemoOnly:
		return ClassDemoLock
	case s.TakesLock:
		return ClassLock
	case s.RedisKeyPrefix != "":
		return ClassMirror
	}
	return ClassUnprotected
}
