package inventory_test

import (
	"context"
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
	stall  chan struct{} // closed at the first stall event
	once   sync.Once
}

func newRecorder() *recorder { return &recorder{stall: make(chan struct{})} }

func (r *recorder) Observe(ev inventory.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if ev.Kind == inventory.EventStall {
		r.once.Do(func() { close(r.stall) })
	}
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

// stallService is a service with the demo stall fault, as main wires it: a lock client with
// the watchdog, and a second one on the same Redis and prefix without it for stalled holders.
func stallService(t *testing.T, srv *redistest.Server, lease time.Duration) (*inventory.Service, *recorder) {
	t.Helper()
	db, _ := openDB(t, sqliteBackend)
	rdb := warmClient(t, srv)
	lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix, Lease: lease, Wait: 10 * lease})
	stall := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix, Lease: lease, Wait: 10 * lease, DisableWatchdog: true})
	t.Cleanup(func() { _ = lc.Close(); _ = stall.Close() })
	rec := newRecorder()
	return newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Observer: rec,
		StallFor: 3 * lease, StallLocker: inventory.NewLocker(stall)}), rec
}

// stallRun sends one stalled purchase, waits until it stalls (holding the lock whose lease
// runs out), then sends buyers more, and returns the stalled purchase's result.
func stallRun(t *testing.T, s *inventory.Service, rec *recorder, strategy string, item int64, buyers int) (inventory.Receipt, error) {
	t.Helper()
	ctx := context.Background()
	type result struct {
		rec inventory.Receipt
		err error
	}
	stalled := make(chan result, 1)
	go func() {
		r, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: strategy, Stall: true})
		stalled <- result{r, err}
	}()
	select {
	case <-rec.stall:
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

// With the stall fault, lock writes stale every time: the stalled holder's lease runs out,
// the next buyers take the lock, and its write lands after theirs with an older token.
func TestStallLockWritesStale(t *testing.T) {
	srv := redistest.Start(t)
	s, rec := stallService(t, srv, time.Second)
	item := resetItems(t, s, 10)[0]
	stalledRec, err := stallRun(t, s, rec, inventory.StrategyLock, item, 4)
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

// With the stall fault, lock+guard's stale write is refused by the fence every time; the
// purchase is retried under a new lock and sells, and nothing is oversold or lost.
func TestStallLockGuardFenceRefuses(t *testing.T) {
	srv := redistest.Start(t)
	s, rec := stallService(t, srv, time.Second)
	item := resetItems(t, s, 10)[0]
	stalledRec, err := stallRun(t, s, rec, inventory.StrategyLockGuard, item, 4)
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

func TestStallNeedsStallFor(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	s := newService(t, inventory.Config{DB: db})
	item := resetItems(t, s, 10)[0]
	_, err := s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: inventory.StrategyGuard, Stall: true})
	assert.ErrorIs(t, err, inventory.ErrInvalid)
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
