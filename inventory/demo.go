package inventory

import (
	"context"
	"errors"
	"fmt"
)

// The demo strategies of issue 14: the broken locks the articles walk through before the right
// one (each over a Locker of package pitfalls, with its own key prefix), and the lockless
// alternatives people reach for. They exist to be seen failing, or to be compared: a Service
// offers them only with Config.Demo (the storefront's --demo), and strategyTable marks them
// Demo.
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
// TTL by the injected crash blocks setnx-expire only.
const (
	pitfallKeyPrefix = "stockguard:pitfall:"
	StockKeyPrefix   = "stockguard:stock:" // the Redis mirror of the stock (StockMirror): one string per item id
)

// PitfallKeyPrefix is the key prefix of the broken lock of the pitfall strategy name
// ("stockguard:pitfall:setnx-expire:").
func PitfallKeyPrefix(name string) string { return pitfallKeyPrefix + name + ":" }

// DemoOnly reports whether the strategy name exists only in demo mode.
func DemoOnly(name string) bool {
	for _, st := range strategyTable {
		if st.Name == name {
			return st.Demo
		}
	}
	return false
}

// StockMirror is the copy of every item's stock in Redis that redis-stock, redis-stock+guard
// and watch sell from (package pitfalls adapts go-redis to it; main wires it in demo mode).
// Stocks are mirrored by item id. Errors other than the ones named wrap ErrUnavailable.
type StockMirror interface {
	// Seed replaces the whole mirror with stocks (item id → stock): the catalogue reset calls it.
	Seed(ctx context.Context, stocks map[int64]int) error
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

// Purger is implemented by a pitfall Locker (Config.Pitfalls) whose state a catalogue reset
// deletes: every key under its prefix. A setnx-expire key left without a TTL by the crash
// fault would otherwise block its item until someone deletes it by hand.
type Purger interface {
	Purge(ctx context.Context) error
}

// purgePitfalls deletes the state of every pitfall lock that can purge it (Reset calls it).
func (s *Service) purgePitfalls(ctx context.Context) error {
	var errs []error
	for name, l := range s.pitfalls {
		if p, ok := l.(Purger); ok {
			if err := p.Purge(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ErrNotMirrored: the item has no stock in the mirror (never seeded, or Redis lost it).
var ErrNotMirrored = errors.New("item stock not mirrored in Redis")

// PurchaseRequest.Crash: the demo fault of setnx-expire.
type crashKey struct{}

// CrashInjected reports whether the purchase running under ctx asked for the demo crash fault
// (PurchaseRequest.Crash): the setnx-expire lock then "dies" between its SETNX and its EXPIRE.
func CrashInjected(ctx context.Context) bool {
	v, _ := ctx.Value(crashKey{}).(bool)
	return v
}

func withCrash(ctx context.Context) context.Context { return context.WithValue(ctx, crashKey{}, true) }
