package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/models"
)

// Config configures a Service. DB is required; everything else is optional.
type Config struct {
	DB        *gorm.DB  // opened with models.Open
	Locker    Locker    // the Redis lock (NewLocker); nil: lock and lock+guard answer ErrUnavailable
	Redlock   Locker    // Redlock over several nodes; nil: redlock+guard is not offered
	Admission Admission // nil: no admission limit
	Default   string    // strategy of requests that name none; "" means lock+guard
	Logger    *slog.Logger

	// Checks are the readiness checks of the backing services besides the database (main
	// passes one per configured Redis node), run by Readiness and Ready. Default: none.
	Checks []Check
	// OnRedisDown is what lock+guard and redlock+guard do when the lock service is
	// unavailable: OnRedisDownFail (default) answers ErrUnavailable, OnRedisDownGuard sells
	// through the database guard alone (degraded.go). The admission limit follows it.
	OnRedisDown string
	// MaxBatch is the most purchases of one item one lock hold of lock+guard and
	// redlock+guard sells in this process (coalescing); 0 means DefaultMaxBatch, 1 one
	// purchase per hold (no coalescing).
	MaxBatch int
	// StreamHold is how long one coalesced hold of lock+guard (not redlock+guard, whose
	// lock issues one fencing token per hold) keeps admitting the buyers who arrive while
	// it works (each starts its work at once; the completed ones are written together). 0
	// (default): a hold sells to the buyers waiting when it begins, and the lock passes
	// between processes after each batch. Raise it when a balancer sends each item's buyers
	// to one process: one hold then serves them all, at the price of other processes' buyers
	// of the item (and carts of it) waiting up to that long.
	StreamHold time.Duration
	// StreamAlone makes a coalesced hold of lock+guard (not redlock+guard) stream while
	// nobody else wants its locks: it keeps admitting the buyers who arrive, past StreamHold,
	// until another Obtain waits for its item's lock or for a lock it took for a cart
	// (locking.Lock.Contended, asked at its start and after its writes), or a cart of its queue
	// has been left waiting too often for another lock (coalesce_cart.go). Behind a balancer
	// that sends each item to one process, one hold then serves the item's buyers for as
	// long as they come, and the lock still passes on as soon as another process asks for it.
	// Default false; the storefront's --stream-alone is true.
	StreamAlone bool
	// Holds, if set, receives every coalesced lock hold (metrics).
	Holds HoldObserver

	// Sleep spends the simulated work; tests may replace it. Default: a timer that ends early
	// with ctx's error when ctx ends.
	Sleep func(ctx context.Context, d time.Duration) error
	// WriteTimeout is the deadline of every write transaction, from BEGIN to COMMIT, whatever
	// the caller's context: past it the transaction is rolled back and the purchase answers
	// ErrUnavailable. It bounds the read of an item's stock that begins a hold too (an item's
	// worker reads under a context that never ends). Default (and for d <= 0): DefaultWriteTimeout.
	WriteTimeout time.Duration

	// Observer, if set, is told of every purchase attempt's outcome and of lock waits
	// (events.go). Default: none.
	Observer Observer
	// Extra are strategies added after the built-in ones, in order (each offered under its own
	// name, which must not repeat one offered already). Default: none.
	Extra []Strategy

	// Multi takes several item locks at once for the carts and holds of lock+guard
	// (checkout.go). Default: Locker, when it is one (NewLocker's is). When it is nil and
	// lock+guard coalesces (MaxBatch > 1) over a Locker that can take a lock without waiting
	// (NewLocker's can), carts and holds are coalesced instead (coalesce_cart.go): each waits
	// for a hold of one of its items; Multi serves only MaxBatch 1. Setting Multi makes every
	// cart take its locks through it, at once (tests inject faults so).
	Multi MultiLocker
	// Tracer, if set, makes the package's spans (trace.go: lock.wait, lock.hold, hold.write,
	// cart.escalate) and annotates each purchase's request span (the span in its context)
	// with its item and outcome. Default (nil): no spans, and nothing allocated for them.
	Tracer trace.Tracer

	// HoldTTL is the life of a hold whose request names none (holds.go). Default (and for
	// d <= 0): DefaultHoldTTL.
	HoldTTL time.Duration
}

// DefaultWriteTimeout is Config.WriteTimeout's default: longer than the default statement
// timeout (SQLite's busy timeout) of models.Open, so a wait for a lock fails as busy first.
const DefaultWriteTimeout = 10 * time.Second

// Service sells items with the strategy each request names and answers catalogue queries.
// It is safe for concurrent use.
type Service struct {
	db         *gorm.DB
	store      store
	log        *slog.Logger
	def        string
	checks     []Check
	onDown     string
	admission  Admission
	strategies map[string]strategy
	names      []string
	rows       []StrategyInfo // the offered rows, in table order
	resets     []Resetter     // what the offered rows keep outside the database (Reset)
	keys       keyed[string]  // idempotency keys in flight in this process
	deps       deps           // what the strategies share; deps.observe reports each attempt
	life       *lifecycle     // the coalescing workers
	multi      MultiLocker    // carts and holds of lock+guard; nil: they answer ErrUnavailable
	cartHolds  *coalesced     // lock+guard's coalescing, when it can coalesce carts; nil: ObtainMany
	holdTTL    time.Duration  // a hold's default life
}

// NewService returns a Service over cfg. It fails when cfg.DB is nil, a name of cfg.Extra
// repeats one offered already, or cfg.Default is not a strategy the service offers.
func NewService(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("inventory: Config.DB is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Default == "" {
		cfg.Default = StrategyLockGuard
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if !ValidOnRedisDown(cfg.OnRedisDown) {
		return nil, fmt.Errorf("inventory: OnRedisDown %q: want %q or %q", cfg.OnRedisDown, OnRedisDownFail, OnRedisDownGuard)
	}
	switch {
	case cfg.StreamHold < 0:
		return nil, fmt.Errorf("inventory: Config.StreamHold %s is negative", cfg.StreamHold)
	case cfg.MaxBatch < 0:
		return nil, fmt.Errorf("inventory: Config.MaxBatch %d is negative", cfg.MaxBatch)
	case cfg.MaxBatch == 0:
		cfg.MaxBatch = DefaultMaxBatch
	}
	st, err := newStore(cfg.DB, cfg.WriteTimeout)
	if err != nil {
		return nil, err
	}
	s := &Service{
		db:        cfg.DB,
		store:     st,
		life:      newLifecycle(),
		log:       cfg.Logger,
		def:       cfg.Default,
		checks:    cfg.Checks,
		onDown:    cfg.OnRedisDown,
		admission: cfg.Admission,
	}
	d := deps{store: s.store, sleep: cfg.Sleep, log: cfg.Logger, obs: cfg.Observer, life: s.life, holds: cfg.Holds,
		trace: tracer{cfg.Tracer}}
	s.deps = d
	table := append(append([]Strategy(nil), builtinStrategies...), cfg.Extra...)
	s.strategies = make(map[string]strategy, len(table))
	for _, st := range table {
		if st.Redlock && cfg.Redlock == nil {
			continue
		}
		if _, dup := s.strategies[st.Name]; dup || st.build == nil {
			return nil, fmt.Errorf("inventory: strategy %q: offered twice, or not built by this package", st.Name)
		}
		s.strategies[st.Name] = st.build(d, cfg)
		s.names = append(s.names, st.Name)
		s.rows = append(s.rows, st.StrategyInfo)
		for _, r := range st.resets {
			if !slices.ContainsFunc(s.resets, func(o Resetter) bool { return sameResetter(o, r) }) {
				s.resets = append(s.resets, r)
			}
		}
	}
	if hr, ok := s.strategies[StrategyLockGuard].(holdRouter); ok && cfg.Multi == nil && hr.coalesced.carts() {
		s.cartHolds = hr.coalesced
	}
	s.multi, s.holdTTL = cfg.Multi, cfg.HoldTTL
	if s.multi == nil {
		s.multi, _ = takeoverOf(cfg.Locker).(MultiLocker) // lock+guard's carts and holds: fenced
	}
	if s.holdTTL <= 0 {
		s.holdTTL = DefaultHoldTTL
	}
	if _, ok := s.strategies[s.def]; !ok {
		return nil, fmt.Errorf("inventory: default strategy %q is not offered (offered: %v)", s.def, s.names)
	}
	return s, nil
}

// Close stops the service's coalescing workers (lock+guard and redlock+guard with MaxBatch >
// 1): a lock wait in progress ends, purchases still queued are answered ErrUnavailable, and
// later purchases of those strategies too. It returns once every worker has ended. Call it
// after the HTTP server has drained its requests, before closing the database and Redis.
func (s *Service) Close() error {
	s.life.close()
	return nil
}

// Strategies returns the names of the strategies this service offers, in a fixed order.
func (s *Service) Strategies() []string { return append([]string(nil), s.names...) }

// DefaultStrategy returns the strategy used when a request names none.
func (s *Service) DefaultStrategy() string { return s.def }

// Purchase sells req.Quantity units of req.ItemID with req.Strategy (or the default).
//
// It returns the receipt of the new order, or, when req.IdempotencyKey already produced an
// order for the same item and quantity, that order's receipt with Replayed set. Errors wrap
// one sentinel: ErrInvalid, ErrOverloaded (from Admission), ErrNotFound, ErrSoldOut,
// ErrInsufficientStock, ErrIdempotencyConflict, ErrLockTimeout, ErrLockLost (after one
// retry; nothing written), ErrLockNotReplicated (a lock no replica acknowledged, under
// locking's Options.Replicas; nothing written), ErrUnavailable (lock service down, or the
// database busy after one retry). When ctx ends first, the error is ctx's (wrapped in ErrLockTimeout if it ended a
// wait for a lock). Other errors are unexpected. A failed purchase writes nothing.
//
// The receipt's Spent, and SpentOf(err) for an error, tell what the purchase cost: its
// simulated work and its wait for the lock.
func (s *Service) Purchase(ctx context.Context, req PurchaseRequest) (Receipt, error) {
	sp := &spent{}
	rec, err := s.purchase(ctx, req, sp)
	s.deps.trace.annotate(ctx, req, s.strategyName(req.Strategy), rec, err)
	if err != nil {
		return Receipt{}, &spentError{err: err, spent: sp.get()}
	}
	rec.Spent = sp.get()
	return rec, nil
}

func (s *Service) purchase(ctx context.Context, req PurchaseRequest, sp *spent) (Receipt, error) {
	st, name, err := s.validate(&req)
	if err != nil {
		return Receipt{}, err
	}
	p := purchase{
		itemID:      req.ItemID,
		quantity:    req.Quantity,
		work:        req.Work,
		key:         req.IdempotencyKey,
		fingerprint: fingerprint(req.ItemID, req.Quantity),
		intercept:   interceptorOf(ctx),
		spent:       sp,
	}
	if p.key == "" {
		return s.admitAndRun(ctx, st, name, p)
	}

	// One request per key at a time in this process: a second one waits, then replays.
	unlock, err := s.keys.lock(ctx, p.key)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: waiting for an earlier request with the same idempotency key: %w", ErrLockTimeout, err)
	}
	defer unlock()
	if rec, ok, err := s.replay(ctx, p); ok || err != nil {
		return rec, err
	}
	rec, err := s.admitAndRun(ctx, st, name, p)
	if err == nil {
		return rec, nil
	}
	// Another process may have stored an order under this key since our lookup: our insert
	// then collided and was rolled back (errDuplicateKey), or that order took the last units
	// and ours failed (sold out). Either way the key's order, if there is one, is the answer.
	rec, ok, rerr := s.replay(context.WithoutCancel(ctx), p)
	switch {
	case ok || errors.Is(rerr, ErrIdempotencyConflict):
		return rec, rerr
	case errors.Is(err, errDuplicateKey):
		return Receipt{}, collided(p.key, "order", rerr)
	}
	return Receipt{}, err // the replay's own failure says nothing about the purchase
}

// strategyName is the strategy a request naming name runs (the default for "").
func (s *Service) strategyName(name string) string {
	if name == "" {
		return s.def
	}
	return name
}

// admitAndRun runs the purchase once the admission limit (when configured) lets it in. It
// comes after the idempotency replay, so replaying a finished purchase is never turned away.
func (s *Service) admitAndRun(ctx context.Context, st strategy, name string, p purchase) (Receipt, error) {
	if s.admission != nil {
		release, err := s.admission.Acquire(ctx, p.itemID)
		switch {
		case sellsDegraded(s.onDown, err):
			// The admission limit follows --on-redis-down: without Redis there is no limit.
			s.log.DebugContext(ctx, "admission limit unavailable: admitted", "item", p.itemID, "err", err)
		case err != nil:
			return Receipt{}, err
		default:
			defer release()
		}
	}
	return s.run(ctx, st, name, p)
}

// replay returns the receipt of the order stored under p.key, if there is one; a key that
// placed a hold is ErrIdempotencyConflict (hold_keys.go).
func (s *Service) replay(ctx context.Context, p purchase) (Receipt, bool, error) {
	o, ok, err := s.store.orderByKey(ctx, p.key)
	if err != nil {
		return Receipt{}, false, s.dbErr(err)
	}
	if !ok {
		return Receipt{}, false, s.holdKeyConflict(ctx, p.key)
	}
	if o.Fingerprint != p.fingerprint {
		return Receipt{}, false, fmt.Errorf("%w: key was used for item %d, quantity %d",
			ErrIdempotencyConflict, o.ItemID, o.Quantity)
	}
	return receiptOf(o, true), true, nil
}

// run calls the strategy, retrying once after a lost lock or stale fence and once after the
// database said busy (SQLite's SQLITE_BUSY; PostgreSQL's serialization failure or deadlock:
// models.IsBusy), a transaction rolled back as a whole. A commit of unknown outcome is never
// retried.
func (s *Service) run(ctx context.Context, st strategy, name string, p purchase) (Receipt, error) {
	lostRetried, busyRetried := false, false
	for {
		rec, err := st.buy(ctx, p)
		s.deps.observe(p, name, rec, err)
		if s.deps.trace.on() {
			fenceRefused(trace.SpanFromContext(ctx), err) // the request's span: its write refused as stale
		}
		switch {
		case err == nil:
			s.log.DebugContext(ctx, "purchase", "item", p.itemID, "quantity", p.quantity, "strategy", name,
				"order", rec.OrderID, "remaining", rec.Remaining, "fence", rec.FenceToken)
			return rec, nil
		case errors.Is(err, ErrLockLost):
			if !lostRetried && ctx.Err() == nil {
				lostRetried = true
				s.log.InfoContext(ctx, "purchase retried after lost lock", "item", p.itemID, "strategy", name, "err", err)
				continue
			}
			s.log.WarnContext(ctx, "purchase failed: lock lost", "item", p.itemID, "strategy", name, "err", err)
			return Receipt{}, err
		case models.IsBusy(err):
			if !busyRetried && ctx.Err() == nil {
				busyRetried = true
				s.log.WarnContext(ctx, "purchase retried after database busy", "item", p.itemID, "strategy", name)
				continue
			}
			return Receipt{}, fmt.Errorf("%w: database busy: %w", ErrUnavailable, err)
		case isDomain(err), errors.Is(err, errDuplicateKey):
			return Receipt{}, err
		default:
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "purchase failed", "item", p.itemID, "strategy", name, "err", err)
			}
			return Receipt{}, s.dbErr(err)
		}
	}
}

func (s *Service) validate(req *PurchaseRequest) (strategy, string, error) {
	switch {
	case req.ItemID <= 0:
		return nil, "", fmt.Errorf("%w: item id must be positive", ErrInvalid)
	case req.Quantity < 1 || req.Quantity > MaxQuantity:
		return nil, "", fmt.Errorf("%w: quantity must be an integer from 1 to %d, got %d", ErrInvalid, MaxQuantity, req.Quantity)
	case req.Work < 0 || req.Work > MaxWork:
		return nil, "", fmt.Errorf("%w: simulated work must be from 0s to %s, got %s", ErrInvalid, MaxWork, req.Work)
	case len(req.IdempotencyKey) > MaxIdempotencyKey || !printableASCII(req.IdempotencyKey):
		return nil, "", fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", ErrInvalid, MaxIdempotencyKey)
	}
	name := req.Strategy
	if name == "" {
		name = s.def
	}
	st, ok := s.strategies[name]
	if !ok {
		return nil, "", fmt.Errorf("%w: unknown strategy %q (offered: %v)", ErrInvalid, name, s.names)
	}
	return st, name, nil
}

func printableASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// fingerprint identifies the request an idempotency key was used for.
func fingerprint(itemID int64, quantity int) string {
	return "item=" + strconv.FormatInt(itemID, 10) + ";quantity=" + strconv.Itoa(quantity)
}

// isDomain reports whether err wraps one of the package's sentinels.
func isDomain(err error) bool {
	for _, s := range []error{ErrInvalid, ErrNotFound, ErrSoldOut, ErrInsufficientStock,
		ErrIdempotencyConflict, ErrOverloaded, ErrLockTimeout, ErrLockLost, ErrLockNotReplicated, ErrUnavailable} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// dbErr maps a database error: unreachable or busy becomes ErrUnavailable, others stay as is.
func (s *Service) dbErr(err error) error {
	if err == nil || isDomain(err) {
		return err
	}
	if models.IsUnavailable(err) {
		return fmt.Errorf("%w: database: %w", ErrUnavailable, err)
	}
	return err
}

// sameResetter reports whether a and b are the same Resetter (several rows may share one, as
// the rows over one copy of the stock do): the same comparable value.
func sameResetter(a, b Resetter) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// collided is the answer to a write whose idempotency key collided with another request's
// (errDuplicateKey, the write rolled back) when the replay of the key then failed (rerr, a
// database error already mapped) or found no what under it (the other request's row is gone
// again): 503 unavailable, to be retried with the key, never 500.
func collided(key, what string, rerr error) error {
	if rerr != nil {
		return rerr
	}
	return fmt.Errorf("%w: idempotency key %q collided with another request's, but no %s holds it now; retry", ErrUnavailable, key, what)
}
