//go:build !nodemo

package inventory

import (
	"context"
	"errors"
)

// The demo strategies: the broken locks that accounts of distributed locking walk through
// before the right one (each over a Locker of package pitfalls, with its own key prefix), and
// the lockless alternatives people reach for. They exist to be seen failing, or to be
// compared: they plug into a Service through Config.Extra (DemoStrategies), and their rows are
// marked Demo. A build with the nodemo tag leaves them out.
const (
	StrategySetnxExpire     = "setnx-expire"
	StrategyDelRelease      = "del-release"
	StrategyFixedLease      = "fixed-lease"
	StrategyOptimistic      = "optimistic"
	StrategyRedisStock      = "redis-stock"
	StrategyRedisStockGuard = "redis-stock+guard"
	StrategyWatch           = "watch"
)

// Redis key prefixes of the demo strategies (the rest of the layout is in locker.go). A
// pitfall lock's keys never collide with the real lock's: a setnx-expire key left without a
// TTL by a crash between its two commands blocks setnx-expire only.
const (
	pitfallKeyPrefix = "stockguard:pitfall:"
	StockKeyPrefix   = "stockguard:stock:" // the Redis mirror of the stock (StockMirror): one string per item id
)

// PitfallKeyPrefix is the key prefix of the broken lock of the pitfall strategy name
// ("stockguard:pitfall:setnx-expire:").
func PitfallKeyPrefix(name string) string { return pitfallKeyPrefix + name + ":" }

// DemoDeps is what the demo strategies sell with.
type DemoDeps struct {
	// Pitfalls are the broken locks of setnx-expire, del-release and fixed-lease (package
	// pitfalls), by strategy name; a missing one answers ErrUnavailable. A lock that is also a
	// Resetter (its keys deleted at a catalogue reset) is reset with the catalogue.
	Pitfalls map[string]Locker
	// Mirror is the Redis copy of the stock of redis-stock, redis-stock+guard and watch; the
	// catalogue reset seeds it (StockMirror is a Resetter). nil: they answer ErrUnavailable.
	Mirror StockMirror
}

// DemoStrategies returns the demo rows of the strategies table, in order, for Config.Extra:
// the pitfall locks (setnx-expire, del-release, fixed-lease), then the lockless alternatives
// (optimistic, redis-stock, redis-stock+guard, watch). Every row is marked Demo. With a zero
// DemoDeps the rows still describe themselves (a help text may list them).
func DemoStrategies(d DemoDeps) []Strategy {
	var mirrorResets []Resetter
	if d.Mirror != nil {
		mirrorResets = []Resetter{d.Mirror}
	}
	pitfall := func(name string, info StrategyInfo) Strategy {
		l := d.Pitfalls[name]
		var resets []Resetter
		if r, ok := l.(Resetter); ok {
			resets = []Resetter{r}
		}
		info.Name, info.Demo, info.Locks, info.KeyPrefix = name, true, true, PitfallKeyPrefix(name)
		return Strategy{StrategyInfo: info, resets: resets,
			build: func(dp deps, _ Config) strategy { return pitfallLock{dp, l, name} }}
	}
	mirrored := func(info StrategyInfo, rs redisStock) Strategy {
		info.Demo, info.KeyPrefix = true, StockKeyPrefix
		rs.name, rs.mirror = info.Name, d.Mirror
		return Strategy{StrategyInfo: info, resets: mirrorResets,
			build: func(dp deps, _ Config) strategy { b := rs; b.deps = dp; return b }}
	}
	return []Strategy{
		pitfall(StrategySetnxExpire, StrategyInfo{HowIt: "lock by SETNX, then EXPIRE as a second command; naive inside",
			Safety: "a holder that dies between the two leaves a lock with no TTL: the item is blocked until someone deletes the key"}),
		pitfall(StrategyDelRelease, StrategyInfo{HowIt: "lock by SET NX PX (fixed lease), released by a plain DEL; naive inside",
			Safety: "oversells: a holder whose lease ran out deletes the next holder's lock, and a third buyer enters beside the second"}),
		pitfall(StrategyFixedLease, StrategyInfo{HowIt: "lock by SET NX PX, owner-checked release, no watchdog; naive inside",
			Safety: "oversells when the work outlives the lease: a second holder enters and both write"}),
		{StrategyInfo: StrategyInfo{Name: StrategyOptimistic, HowIt: "no lock: read stock and version, work, UPDATE ... WHERE version = ?, retry on conflict",
			Demo: true, Safe: true, Safety: "safe: a stale write changes nothing and is retried; under contention the retries (and their work) pile up"},
			build: func(dp deps, _ Config) strategy { return optimistic{dp} }},
		mirrored(StrategyInfo{Name: StrategyRedisStock, HowIt: "stock mirrored in Redis, checked and decremented by one Lua script; the order written afterwards",
			Safety: "oversells when Redis loses its latest writes (restart from an older snapshot, failover): the mirror sells again what was sold"},
			redisStock{}),
		mirrored(StrategyInfo{Name: StrategyRedisStockGuard, HowIt: "redis-stock, then the guarded update decides; refused units go back to Redis",
			Safe: true, Safety: "safe: the database has the last word, whatever Redis forgot"},
			redisStock{guard: true}),
		mirrored(StrategyInfo{Name: StrategyWatch, HowIt: "WATCH/MULTI/EXEC on the mirrored stock, retried on abort; the order written afterwards",
			Safety: "safe on the mirror; oversells as redis-stock when Redis loses its latest writes"},
			redisStock{watch: true}),
	}
}

// DemoOnly reports whether name is the name of a demo strategy (a row of DemoStrategies).
func DemoOnly(name string) bool {
	for _, st := range DemoStrategies(DemoDeps{}) {
		if st.Name == name {
			return true
		}
	}
	return false
}

// StockMirror is the copy of every item's stock in Redis that redis-stock, redis-stock+guard
// and watch sell from (package pitfalls adapts go-redis to it). Stocks are mirrored by item
// id. Errors other than the ones named wrap ErrUnavailable.
type StockMirror interface {
	// Reset replaces the whole mirror with stocks (item id → stock): the catalogue reset
	// calls it.
	Resetter
	// Init mirrors itemID's stock when it is not mirrored yet (SET NX) and reports whether it did.
	Init(ctx context.Context, itemID int64, stock int) (bool, error)
	// Take checks that quantity fits in itemID's mirrored stock and decrements it, atomically
	// (one Lua script), and returns what remains. It fails with ErrSoldOut or
	// ErrInsufficientStock (nothing taken), or ErrNotMirrored.
	Take(ctx context.Context, itemID int64, quantity int) (remaining int, err error)
	// TakeWatched does what Take does with WATCH, GET, MULTI, DECRBY, EXEC, again after every
	// aborted EXEC; retries counts the aborts. When they pile up past its bound it fails with
	// ErrOverloaded.
	TakeWatched(ctx context.Context, itemID int64, quantity int) (remaining, retries int, err error)
	// Give adds quantity back to itemID's mirrored stock (the compensating increment).
	Give(ctx context.Context, itemID int64, quantity int) error
}

// ErrNotMirrored: the item has no stock in the mirror (never seeded, or Redis lost it).
var ErrNotMirrored = errors.New("item stock not mirrored in Redis")
