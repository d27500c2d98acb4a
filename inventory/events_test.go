package inventory_test

import (
	"context"
	"errors"
	"github.com/stockguard/stockguard/internal/testutil"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []inventory.Event
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) Observe(ev inventory.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) kinds(kind string) []inventory.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []inventory.Event
	for _, ev := range r.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// stall is the interceptor of a stop-the-world pause before the write, as the lab builds its
// stall fault on the Interceptor: the purchase's lock comes from a lock client on the same
// Redis and prefix without the watchdog, and its first write attempt stops for a while
// without watching anything, so that the lease runs out meanwhile.
type stall struct {
	locker  inventory.Locker // no watchdog
	pause   time.Duration
	once    sync.Once
	stalled chan struct{} // closed when the pause begins
}

func (s *stall) Locker(string, inventory.Locker) inventory.Locker { return s.locker }

func (s *stall) BeforeWrite(ctx context.Context, _ int64, _ string) error {
	first := false
	s.once.Do(func() { first = true; close(s.stalled) })
	if !first {
		return nil // the retry after a refused write is not stopped again
	}
	t := time.NewTimer(s.pause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stallService is a service whose lock client has the watchdog, and the stall interceptor
// over a second lock client on the same Redis and prefix without it.
func stallService(t *testing.T, srv *redistest.Server, lease time.Duration) (*inventory.Service, *recorder, *stall) {
	t.Helper()
	db, _ := openDB(t, sqliteBackend)
	rdb := warmClient(t, srv)
	lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix, Lease: lease, Wait: 10 * lease})
	noWatchdog := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix, Lease: lease, Wait: 10 * lease, DisableWatchdog: true})
	t.Cleanup(func() { _ = lc.Close(); _ = noWatchdog.Close() })
	rec := newRecorder()
	st := &stall{locker: inventory.NewLocker(noWatchdog), pause: 3 * lease, stalled: make(chan struct{})}
	return newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Observer: rec}), rec, st
}

// stallRun sends one stalled purchase, waits until it stalls (holding the lock whose lease
// runs out), then sends buyers more, and returns the stalled purchase's result.
func stallRun(t *testing.T, s *inventory.Service, st *stall, strategy string, item int64, buyers int) (inventory.Receipt, error) {
	t.Helper()
	ctx := context.Background()
	type result struct {
		rec inventory.Receipt
		err error
	}
	stalled := make(chan result, 1)
	go func() {
		r, err := s.Purchase(inventory.WithInterceptor(ctx, st), inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: strategy})
		stalled <- result{r, err}
	}()
	select {
	case <-st.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled purchase never stalled")
	}
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: strategy, Work: 10 * time.Millisecond})
			assert.NoError(t, err, "a buyer queued behind the stalled holder")
		}()
	}
	wg.Wait()
	r := <-stalled
	return r.rec, r.err
}

// With a stall before the write, lock writes stale every time: the stalled holder's lease runs out,
// the next buyers take the lock, and its write lands after theirs with an older token.
func TestStallLockWritesStale(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	s, rec, fault := stallService(t, srv, time.Second)
	item := resetItems(t, s, 10)[0]
	stalledRec, err := stallRun(t, s, fault, inventory.StrategyLock, item, 4)
	require.NoError(t, err, "lock does not look at its lock after the stall: it writes")

	orders := ordersOf(t, s, item)
	require.Len(t, orders, 5)
	last := orders[len(orders)-1]
	assert.Equal(t, stalledRec.OrderID, last.ID, "the stalled write is the last one")
	for _, o := range orders[:len(orders)-1] {
		assert.Greater(t, o.FenceToken, last.FenceToken, "a newer holder wrote before the stale one")
	}
	st := statsOf(t, s, item)
	assert.Equal(t, 5, st.SoldUnits)
	assert.Equal(t, 9, st.Stock, "the stale write set the stock it computed before the others sold: lost updates")
	assert.Len(t, rec.kinds(inventory.EventFenceRefused), 0)
	assert.Len(t, rec.kinds(inventory.EventOrder), 5)
}

// With a stall before the write, lock+guard's stale write is refused by the fence every time; the
// purchase is retried under a new lock and sells, and nothing is oversold or lost.
func TestStallLockGuardFenceRefuses(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	s, rec, fault := stallService(t, srv, time.Second)
	item := resetItems(t, s, 10)[0]
	stalledRec, err := stallRun(t, s, fault, inventory.StrategyLockGuard, item, 4)
	require.NoError(t, err, "the retry after the refusal sells")

	refused := rec.kinds(inventory.EventFenceRefused)
	require.Len(t, refused, 1)
	assert.Equal(t, item, refused[0].ItemID)
	assert.Greater(t, refused[0].Seen, refused[0].Token, "the database had seen a newer token")
	assert.Greater(t, stalledRec.FenceToken, refused[0].Seen, "the retry wrote with a new token")
	st := statsOf(t, s, item)
	assert.Equal(t, 5, st.SoldUnits)
	assert.Equal(t, 5, st.Stock)
	assertFenceOrder(t, ordersOf(t, s, item))
	assert.Len(t, rec.kinds(inventory.EventOrder), 5)
	assert.NotEmpty(t, rec.kinds(inventory.EventWait))
	assert.Equal(t, len(rec.kinds(inventory.EventWait)), len(rec.kinds(inventory.EventWaitEnd)))
}

// recordingInterceptor records what it is asked and fails the write with err.
type recordingInterceptor struct {
	mu      sync.Mutex
	lockers []string // the strategies Locker was asked for
	writes  []string // the strategies BeforeWrite was asked for
	err     error
}

func (r *recordingInterceptor) Locker(strategy string, l inventory.Locker) inventory.Locker {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lockers = append(r.lockers, strategy)
	return l
}

func (r *recordingInterceptor) BeforeWrite(_ context.Context, _ int64, strategy string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, strategy)
	return r.err
}

// An interceptor is asked for the lock of the strategies that take one, and stands before
// every write; its error ends the purchase with nothing written. A purchase without one, and
// the coalesced path, never call it.
func TestInterceptorStandsBeforeTheWrite(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	s, _ := lockService(t, db, srv, locking.Options{}, nil)
	item := resetItems(t, s, 10)[0]
	refused := errors.New("refused by the interceptor")
	for _, name := range []string{inventory.StrategyNaive, inventory.StrategyGuard, inventory.StrategyLock, inventory.StrategyLockGuard} {
		icpt := &recordingInterceptor{err: refused}
		_, err := s.Purchase(inventory.WithInterceptor(t.Context(), icpt), inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: name})
		require.ErrorIs(t, err, refused, name)
		assert.Equal(t, []string{name}, icpt.writes, name)
		if info := infoOf(t, s, name); info.Locks {
			assert.Equal(t, []string{name}, icpt.lockers, name)
		} else {
			assert.Empty(t, icpt.lockers, name)
		}
	}
	assert.Equal(t, 10, statsOf(t, s, item).Stock, "nothing written")
	assert.Empty(t, ordersOf(t, s, item))

	icpt := &recordingInterceptor{}
	rec, err := s.Purchase(inventory.WithInterceptor(t.Context(), icpt), inventory.PurchaseRequest{ItemID: item, Quantity: 2, Strategy: inventory.StrategyLockGuard})
	require.NoError(t, err)
	assert.Positive(t, rec.FenceToken)
	assert.Equal(t, 8, rec.Remaining)
	assert.Equal(t, []string{inventory.StrategyLockGuard}, icpt.lockers)
}

func infoOf(t *testing.T, s *inventory.Service, name string) inventory.StrategyInfo {
	t.Helper()
	for _, info := range s.DescribeStrategies() {
		if info.Name == name {
			return info
		}
	}
	t.Fatalf("strategy %q not offered", name)
	return inventory.StrategyInfo{}
}

func TestObserverSeesSoldOut(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	rec := newRecorder()
	s := newService(t, inventory.Config{DB: db, Observer: rec})
	item := resetItems(t, s, 1)[0]
	ctx := context.Background()
	for range 2 {
		_, _ = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: inventory.StrategyGuard})
	}
	require.Len(t, rec.kinds(inventory.EventOrder), 1)
	require.Len(t, rec.kinds(inventory.EventSoldOut), 1)
	assert.ErrorIs(t, rec.kinds(inventory.EventSoldOut)[0].Err, inventory.ErrSoldOut)
}

func TestDescribeStrategies(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	s := newService(t, inventory.Config{DB: db})
	infos := s.DescribeStrategies()
	require.Len(t, infos, len(s.Strategies()))
	for i, info := range infos {
		assert.Equal(t, s.Strategies()[i], info.Name)
		assert.NotEmpty(t, info.HowIt, info.Name)
		assert.NotEmpty(t, info.Safety, info.Name)
	}
}
