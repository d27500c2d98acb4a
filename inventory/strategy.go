package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Strategy names, as accepted by Service.Purchase and the X-Strategy header.
const (
	StrategyNaive        = "naive"
	StrategyLocal        = "local"
	StrategyLock         = "lock"
	StrategyGuard        = "guard"
	StrategyLockGuard    = "lock+guard"
	StrategyRedlockGuard = "redlock+guard"
)

// StrategyInfo describes one way of selling: a row of the strategies table.
type StrategyInfo struct {
	Name    string // as accepted by PurchaseRequest.Strategy and X-Strategy
	HowIt   string // how it sells, in one line
	Safe    bool   // never oversells, even when a lock is lost
	Safety  string // when it oversells, or why it does not, in one line
	Redlock bool   // offered only when Config.Redlock is set
	Demo    bool   // demo only (demo.go): offered only when Config.Demo is set
	// KeyPrefix is the prefix of the Redis keys of the strategy's own lock or mirror, for the
	// demo strategies that have one ("" for the others).
	KeyPrefix string

	build func(d deps, cfg Config) strategy
}

// strategyTable is every strategy, in the order the service lists them (and README's table,
// config's help text and the load test follow). It is the one place a strategy is declared.
var strategyTable = []StrategyInfo{
	{Name: StrategyNaive, HowIt: "read stock, check, work, write the computed stock", Safety: "oversells under any concurrency",
		build: func(d deps, _ Config) strategy { return naive{d} }},
	{Name: StrategyLocal, HowIt: "naive inside a per-item sync.Mutex", Safety: "safe in one process, oversells across processes",
		build: func(d deps, _ Config) strategy { return local{deps: d, mu: &keyed[int64]{}} }},
	{Name: StrategyLock, HowIt: "naive inside the per-item Redis lock (watchdog), unconditional write", Safety: "oversells when the lock is lost unnoticed (a pause past the lease, a failover)",
		build: func(d deps, cfg Config) strategy { return lock{deps: d, locker: cfg.Locker} }},
	{Name: StrategyGuard, HowIt: "work, then UPDATE ... WHERE stock >= ? and the order in one transaction", Safe: true, Safety: "safe: every conflict lands on the database",
		build: func(d deps, _ Config) strategy { return guard{d} }},
	{Name: StrategyLockGuard, HowIt: "Redis lock; inside it work, then the guarded update with the fence check (one hold sells to every waiting buyer)", Safe: true, Safety: "safe even when the lock is lost: a stale holder's write is refused",
		build: func(d deps, cfg Config) strategy {
			return newLockGuard(d, cfg.Locker, StrategyLockGuard, cfg.MaxBatch, cfg.OnRedisDown)
		}},
	{Name: StrategyRedlockGuard, HowIt: "lock+guard over Redlock (several independent Redis nodes)", Safe: true, Safety: "as lock+guard", Redlock: true,
		build: func(d deps, cfg Config) strategy {
			return newLockGuard(d, cfg.Redlock, StrategyRedlockGuard, cfg.MaxBatch, cfg.OnRedisDown)
		}},
	// The demo strategies (demo.go): the articles' broken locks, then the lockless alternatives.
	{Name: StrategySetnxExpire, HowIt: "lock by SETNX, then EXPIRE as a second command; naive inside", Demo: true,
		Safety:    "a holder that dies between the two leaves a lock with no TTL: the item is blocked until someone deletes the key",
		KeyPrefix: PitfallKeyPrefix(StrategySetnxExpire),
		build: func(d deps, cfg Config) strategy {
			return pitfallLock{d, cfg.Pitfalls[StrategySetnxExpire], StrategySetnxExpire}
		}},
	{Name: StrategyDelRelease, HowIt: "lock by SET NX PX (fixed lease), released by a plain DEL; naive inside", Demo: true,
		Safety:    "oversells: a holder whose lease ran out deletes the next holder's lock, and a third buyer enters beside the second",
		KeyPrefix: PitfallKeyPrefix(StrategyDelRelease),
		build: func(d deps, cfg Config) strategy {
			return pitfallLock{d, cfg.Pitfalls[StrategyDelRelease], StrategyDelRelease}
		}},
	{Name: StrategyFixedLease, HowIt: "lock by SET NX PX, owner-checked release, no watchdog; naive inside", Demo: true,
		Safety:    "oversells when the work outlives the lease: a second holder enters and both write",
		KeyPrefix: PitfallKeyPrefix(StrategyFixedLease),
		build: func(d deps, cfg Config) strategy {
			return pitfallLock{d, cfg.Pitfalls[StrategyFixedLease], StrategyFixedLease}
		}},
	{Name: StrategyOptimistic, HowIt: "no lock: read stock and version, work, UPDATE ... WHERE version = ?, retry on conflict", Demo: true, Safe: true,
		Safety: "safe: a stale write changes nothing and is retried; under contention the retries (and their work) pile up",
		build:  func(d deps, _ Config) strategy { return optimistic{d} }},
	{Name: StrategyRedisStock, HowIt: "stock mirrored in Redis, checked and decremented by one Lua script; the order written afterwards", Demo: true,
		Safety:    "oversells when Redis loses its latest writes (restart from an older snapshot, failover): the mirror sells again what was sold",
		KeyPrefix: StockKeyPrefix,
		build: func(d deps, cfg Config) strategy {
			return redisStock{deps: d, mirror: cfg.Mirror, name: StrategyRedisStock}
		}},
	{Name: StrategyRedisStockGuard, HowIt: "redis-stock, then the guarded update decides; refused units go back to Redis", Demo: true, Safe: true,
		Safety:    "safe: the database has the last word, whatever Redis forgot",
		KeyPrefix: StockKeyPrefix,
		build: func(d deps, cfg Config) strategy {
			return redisStock{deps: d, mirror: cfg.Mirror, name: StrategyRedisStockGuard, guard: true}
		}},
	{Name: StrategyWatch, HowIt: "WATCH/MULTI/EXEC on the mirrored stock, retried on abort; the order written afterwards", Demo: true,
		Safety:    "safe on the mirror; oversells as redis-stock when Redis loses its latest writes",
		KeyPrefix: StockKeyPrefix,
		build: func(d deps, cfg Config) strategy {
			return redisStock{deps: d, mirror: cfg.Mirror, name: StrategyWatch, watch: true}
		}},
}

// StrategyTable returns every strategy this package knows, in table order.
func StrategyTable() []StrategyInfo { return append([]StrategyInfo(nil), strategyTable...) }

// ValidStrategy reports whether name is a strategy this package knows (a Service offers
// redlock+guard only when configured with a Redlock locker).
func ValidStrategy(name string) bool {
	for _, st := range strategyTable {
		if st.Name == name {
			return true
		}
	}
	return false
}

// strategy is one way of selling: a row of strategyTable.
type strategy interface {
	// buy attempts the purchase once. A stale fence or a lost lock is an error wrapping
	// ErrLockLost with nothing written; the service decides whether to retry.
	buy(ctx context.Context, p purchase) (Receipt, error)
}

// deps is what every strategy uses.
type deps struct {
	store store
	sleep func(ctx context.Context, d time.Duration) error // the simulated work
	log   *slog.Logger

	obs         Observer      // nil: nobody is told (events.go)
	stallFor    time.Duration // the demo stall fault's length; 0: off
	stallLocker Locker        // the lock of a stalled purchase: no watchdog

	life  *lifecycle   // owner of the coalescing workers
	holds HoldObserver // nil: none
}

// naive reads the stock (a statement of its own), checks it, works, then writes the stock it
// computed and the order in one short transaction. Concurrent buyers overwrite each other's
// writes: it oversells, and exists to be seen failing.
type naive struct{ deps }

func (s naive) buy(ctx context.Context, p purchase) (Receipt, error) {
	return readCheckWorkWrite(ctx, ctx, s.deps, p, StrategyNaive, 0)
}

// local is naive inside a per-item in-process mutex: safe within one process, oversells when
// several processes sell the same item.
type local struct {
	deps
	mu *keyed[int64]
}

func (s local) buy(ctx context.Context, p purchase) (Receipt, error) {
	unlock, err := s.mu.lock(ctx, p.itemID)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: item %d (in-process mutex): %w", ErrLockTimeout, p.itemID, err)
	}
	defer unlock()
	return readCheckWorkWrite(ctx, ctx, s.deps, p, StrategyLocal, 0)
}

// readCheckWorkWrite is the body of naive, local and lock. Work is spent under workCtx (the
// lock's context for lock); the write is unconditional.
func readCheckWorkWrite(ctx, workCtx context.Context, d deps, p purchase, name string, token int64) (Receipt, error) {
	r, err := d.store.read(workCtx, p.itemID)
	if err != nil {
		return Receipt{}, lostOr(ctx, workCtx, err, p.itemID)
	}
	if err := checkStock(p.itemID, r.Stock, p.quantity); err != nil {
		return Receipt{}, err
	}
	if err := d.work(workCtx, p); err != nil {
		return Receipt{}, lostOr(ctx, workCtx, err, p.itemID)
	}
	if err := workCtx.Err(); err != nil {
		return Receipt{}, lostOr(ctx, workCtx, err, p.itemID)
	}
	if err := d.stall(ctx, p, name); err != nil {
		return Receipt{}, err
	}
	return d.store.writeComputed(ctx, p, name, r.Stock-p.quantity, token)
}

// guard works first, then lets the database decide with a conditional update. Safe; all
// contention lands on the database.
type guard struct{ deps }

func (s guard) buy(ctx context.Context, p purchase) (Receipt, error) {
	if err := s.work(ctx, p); err != nil {
		return Receipt{}, err
	}
	if err := s.stall(ctx, p, StrategyGuard); err != nil {
		return Receipt{}, err
	}
	return s.store.writeGuarded(ctx, p, StrategyGuard)
}

// lock holds the item's Redis lock around read-check-work-write, with an unconditional write:
// safe unless the lock is lost while the holder cannot notice (a pause past the lease, a
// failover). It reports a loss it does notice before writing as ErrLockLost.
type lock struct {
	deps
	locker Locker
}

func (s lock) buy(ctx context.Context, p purchase) (Receipt, error) {
	start := time.Now()
	held, err := s.obtainObserved(ctx, s.locker, p, StrategyLock, 0)
	p.spent.addLock(time.Since(start))
	if err != nil {
		return Receipt{}, err
	}
	defer s.release(ctx, held)
	return readCheckWorkWrite(ctx, held.Context(ctx), s.deps, p, StrategyLock, held.Token())
}

// newLockGuard returns lock+guard (or redlock+guard, with a Redlock locker): coalesced when a
// hold may sell to several buyers (maxBatch > 1), one purchase per hold otherwise.
func newLockGuard(d deps, l Locker, name string, maxBatch int, onDown string) strategy {
	single := lockGuard{deps: d, locker: l, name: name, onDown: onDown}
	if maxBatch == 1 {
		return single
	}
	return faultRouter{single: single, coalesced: newCoalesced(d, l, name, maxBatch, onDown)}
}

// faultRouter sends a purchase with a demo fault (the lab's stall, which holds its own lock
// past its lease) to the one-purchase-per-hold path, so that the fault stops that purchase and
// not a whole batch; every other purchase is coalesced.
type faultRouter struct {
	single    lockGuard
	coalesced *coalesced
}

func (r faultRouter) buy(ctx context.Context, p purchase) (Receipt, error) {
	if p.stall || p.crash {
		return r.single.buy(ctx, p)
	}
	return r.coalesced.buy(ctx, p)
}

// lockGuard holds the item's lock, works under it, then writes with the guard and the fence
// check: a holder whose lock was taken over writes nothing. The item's stored fence token is
// the lock's token floor, so tokens stay above what the database has seen even when Redis lost
// its counter. Also used for redlock+guard, with a Redlock locker.
type lockGuard struct {
	deps
	locker Locker
	name   string
	onDown string // OnRedisDown policy: with guard, an unavailable lock service degrades (degraded.go)
}

func (s lockGuard) buy(ctx context.Context, p purchase) (Receipt, error) {
	// One read for the floor; it also answers not found and sold out without taking the lock.
	// It decides nothing else: the guarded update does.
	r, err := s.store.read(ctx, p.itemID)
	if err != nil {
		return Receipt{}, err
	}
	if err := checkStock(p.itemID, r.Stock, p.quantity); err != nil {
		return Receipt{}, err
	}
	start := time.Now()
	held, err := s.obtainObserved(ctx, s.locker, p, s.name, r.FenceToken)
	p.spent.addLock(time.Since(start))
	if sellsDegraded(s.onDown, err) {
		return sellDegraded(ctx, s.deps, p, s.name)
	}
	if err != nil {
		return Receipt{}, err
	}
	defer s.release(ctx, held)
	lctx := held.Context(ctx)
	if err := s.work(lctx, p); err != nil {
		return Receipt{}, lostOr(ctx, lctx, err, p.itemID)
	}
	if err := lctx.Err(); err != nil {
		return Receipt{}, lostOr(ctx, lctx, err, p.itemID)
	}
	if err := s.stall(ctx, p, s.name); err != nil {
		return Receipt{}, err
	}
	return s.store.writeFenced(ctx, p, s.name, held.Token())
}

// obtain takes the item's lock through l (whose errors already wrap ErrLockTimeout or
// ErrUnavailable, as the Locker port promises).
func obtain(ctx context.Context, l Locker, itemID int64, floor int64) (Held, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: no lock service configured", ErrUnavailable)
	}
	return l.Obtain(ctx, ItemLockName(itemID), floor)
}

// release gives the lock back; Held.Release works under a cancelled ctx too.
func (d deps) release(ctx context.Context, held Held) {
	if err := held.Release(ctx); err != nil {
		d.log.DebugContext(ctx, "lock release failed", "token", held.Token(), "err", err)
	}
}

// lostOr turns an error seen under the lock's context into ErrLockLost when the lock, not the
// caller, ended that context.
func lostOr(ctx, lctx context.Context, err error, itemID int64) error {
	if ctx.Err() == nil && lctx.Err() != nil {
		return fmt.Errorf("%w: item %d: lock lost before the write", ErrLockLost, itemID)
	}
	return err
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
