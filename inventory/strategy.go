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
	Locks   bool   // takes a Redis lock on the item (its lock service comes through Interceptor.Locker)
	Redlock bool   // offered only when Config.Redlock is set
	// Demo marks a row that exists to be seen failing or to be compared, never to sell in a
	// shop; no built-in row is one.
	Demo bool
	// KeyPrefix is the prefix of the Redis keys of the strategy's own lock or stock copy, for
	// the rows that have one of their own ("" for the others).
	KeyPrefix string
}

// Strategy is one row of the strategies table together with what the service builds it
// from. The built-in rows are this package's (StrategyTable); Config.Extra adds rows after
// them. A Strategy is made by a constructor of this package, in the file of the plug-in that
// offers it, since selling reaches the service's store and lock plumbing.
type Strategy struct {
	StrategyInfo
	build func(d deps, cfg Config) strategy
	// resets are what the row keeps outside the database (a lock's keys, a copy of the stock)
	// and must start again from the new catalogue: Service.Reset calls each once.
	resets []Resetter
}

// Resetter is implemented by what a plug-in strategy keeps outside the database (its lock's
// keys, a copy of the stock) that a catalogue reset must start again: Service.Reset calls it,
// after the new catalogue is committed, with the new items' stocks by id.
type Resetter interface {
	Reset(ctx context.Context, stocks map[int64]int) error
}

// builtinStrategies are the built-in rows, in the order the service lists them (and README's
// table, config's help text and the load test follow). It is the one place a built-in
// strategy is declared.
var builtinStrategies = []Strategy{
	{StrategyInfo: StrategyInfo{Name: StrategyNaive, HowIt: "read stock, check, work, write the computed stock", Safety: "oversells under any concurrency"},
		build: func(d deps, _ Config) strategy { return naive{d} }},
	{StrategyInfo: StrategyInfo{Name: StrategyLocal, HowIt: "naive inside a per-item sync.Mutex", Safety: "safe in one process, oversells across processes"},
		build: func(d deps, _ Config) strategy { return local{deps: d, mu: &keyed[int64]{}} }},
	{StrategyInfo: StrategyInfo{Name: StrategyLock, HowIt: "naive inside the per-item Redis lock (watchdog), unconditional write", Locks: true,
		Safety: "oversells when the lock is lost unnoticed (a pause past the lease, a failover)"},
		build: func(d deps, cfg Config) strategy { return lock{deps: d, locker: cfg.Locker} }},
	{StrategyInfo: StrategyInfo{Name: StrategyGuard, HowIt: "work, then UPDATE ... WHERE stock >= ? and the order in one transaction", Safe: true,
		Safety: "safe: every conflict lands on the database"},
		build: func(d deps, _ Config) strategy { return guard{d} }},
	{StrategyInfo: StrategyInfo{Name: StrategyLockGuard, HowIt: "Redis lock; inside it work, then the guarded update with the fence check (one hold sells to every waiting buyer)",
		Safe: true, Locks: true, Safety: "safe even when the lock is lost: a stale holder's write is refused"},
		build: func(d deps, cfg Config) strategy {
			return newLockGuard(d, takeoverOf(cfg.Locker), StrategyLockGuard, cfg)
		}},
	{StrategyInfo: StrategyInfo{Name: StrategyRedlockGuard, HowIt: "lock+guard over Redlock (several independent Redis nodes)", Safe: true, Locks: true,
		Safety: "as lock+guard", Redlock: true},
		build: func(d deps, cfg Config) strategy {
			cfg.StreamHold, cfg.StreamAlone = 0, false // Redlock issues one token per hold: no streaming (coalesce.go)
			return newLockGuard(d, cfg.Redlock, StrategyRedlockGuard, cfg)
		}},
}

// StrategyTable returns the built-in rows of the strategies table, in table order (a Service
// offers them, redlock+guard only with Config.Redlock, then the rows of its Config.Extra).
func StrategyTable() []StrategyInfo {
	infos := make([]StrategyInfo, len(builtinStrategies))
	for i, st := range builtinStrategies {
		infos[i] = st.StrategyInfo
	}
	return infos
}

// ValidStrategy reports whether name is a built-in strategy (a Service offers redlock+guard
// only when configured with a Redlock locker, and offers the names of its Config.Extra too).
func ValidStrategy(name string) bool {
	for _, st := range builtinStrategies {
		if st.Name == name {
			return true
		}
	}
	return false
}

// strategy is one way of selling, as a Strategy row builds it.
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

	obs Observer // nil: nobody is told (events.go)

	life  *lifecycle   // owner of the coalescing workers
	holds HoldObserver // nil: none

	trace tracer // Config.Tracer: the package's spans (trace.go); tracing off when nil
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
	if err := p.beforeWrite(ctx, name); err != nil {
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
	if err := p.beforeWrite(ctx, StrategyGuard); err != nil {
		return Receipt{}, err
	}
	return s.store.writeOne(ctx, p, StrategyGuard, 0)
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
	ctx, span := s.trace.start(ctx, SpanLockHold)
	holdStarted(span, p.itemID, held, false)
	defer holdEnded(span, held) // after the release
	defer s.release(ctx, held)
	return readCheckWorkWrite(ctx, held.Context(ctx), s.deps, p, StrategyLock, held.Token())
}

// newLockGuard returns lock+guard (or redlock+guard, with a Redlock locker): coalesced when a
// hold may sell to several buyers (cfg.MaxBatch > 1), one purchase per hold otherwise.
func newLockGuard(d deps, l Locker, name string, cfg Config) strategy {
	single := lockGuard{deps: d, locker: l, name: name, onDown: cfg.OnRedisDown}
	if cfg.MaxBatch == 1 {
		return single
	}
	return holdRouter{single: single, coalesced: newCoalesced(d, l, name, cfg)}
}

// holdRouter sends a purchase that carries an Interceptor to the one-purchase-per-hold path,
// so that what is done to it (a lock of its own, a pause before its write) touches that
// purchase and not a whole batch; every other purchase is coalesced.
type holdRouter struct {
	single    lockGuard
	coalesced *coalesced
}

func (r holdRouter) buy(ctx context.Context, p purchase) (Receipt, error) {
	if p.intercept != nil {
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
	ctx, span := s.trace.start(ctx, SpanLockHold)
	holdStarted(span, p.itemID, held, false)
	defer holdEnded(span, held) // after the release
	defer s.release(ctx, held)
	lctx := held.Context(ctx)
	if err := s.work(lctx, p); err != nil {
		return Receipt{}, lostOr(ctx, lctx, err, p.itemID)
	}
	if err := lctx.Err(); err != nil {
		return Receipt{}, lostOr(ctx, lctx, err, p.itemID)
	}
	if err := p.beforeWrite(ctx, s.name); err != nil {
		return Receipt{}, err
	}
	return s.store.writeOne(ctx, p, s.name, held.Token())
}

// obtain takes the item's lock through l (whose errors already wrap ErrLockTimeout,
// ErrLockNotReplicated or ErrUnavailable, as the Locker port promises).
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
