package inventory_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// streamService is a lock+guard Service on a real lock whose holds keep admitting for stream.
func streamService(t *testing.T, be backend, srv *redistest.Server, path string, stream time.Duration, holds *holdRecorder,
	sleep func(context.Context, time.Duration) error) *inventory.Service {
	t.Helper()
	return lockGuardService(t, srv, path, inventory.Config{StreamHold: stream, Sleep: sleep}, holds)
}

// lockGuardService is a Service over the SQLite file or PostgreSQL database at path and a
// real lock on srv, configured by cfg (its DB, Locker and Holds are filled in here), closed
// when t ends.
func lockGuardService(t testing.TB, srv *redistest.Server, path string, cfg inventory.Config, holds *holdRecorder) *inventory.Service {
	t.Helper()
	lc := lockClient(t, srv)
	cfg.DB, cfg.Locker = openPath(t, path), inventory.NewLocker(lc)
	if holds != nil {
		cfg.Holds = holds
	}
	s := newService(t, cfg)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A streaming hold admits a buyer who arrives while it works: the late buyer is sold and
// answered while the first buyer's work is still running (the first one's work ends only then),
// both under one hold of the lock, and each write carries its own, greater fencing token.
func TestStreamHoldAdmitsLateBuyers(t *testing.T) { forEachBackend(t, testStreamHoldAdmitsLateBuyers) }

func testStreamHoldAdmitsLateBuyers(t *testing.T, be backend) {
	lb := admitLateBuyer(t, be, inventory.Config{StreamHold: time.Minute})
	assert.Equal(t, []int{2}, lb.holds.get(), "one hold sold to both")
	assert.Greater(t, lb.first.FenceToken, lb.late.FenceToken, "the late buyer's write came first, on the hold's token; the next write drew a greater one")
	orders := ordersOf(t, lb.s, lb.id)
	require.Len(t, orders, 2)
	assertFenceOrder(t, orders)
	assert.NotEqual(t, orders[0].BatchID, orders[1].BatchID, "two writes")
	st := statsOf(t, lb.s, lb.id)
	assert.Equal(t, 5, st.Stock)
	assert.Equal(t, 5, st.SoldUnits)
}

// lateBuyer is what admitLateBuyer leaves: the Service, its item, the two receipts and the
// holds recorded (the hold is over).
type lateBuyer struct {
	s           *inventory.Service
	id          int64
	first, late inventory.Receipt
	holds       *holdRecorder
}

// admitLateBuyer runs a streaming hold's late buyer on a Service configured by cfg (its Sleep
// is set here): a first buyer of 2 units works until a late buyer of 3 has been sold, so the
// late one is sold only if the running hold admitted it. It waits until the hold is over.
func admitLateBuyer(t *testing.T, be backend, cfg inventory.Config) lateBuyer {
	t.Helper()
	srv := redistest.Start(t)
	_, path := openDB(t, be)
	lateSold := make(chan struct{})
	var calls atomic.Int32
	cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		if calls.Add(1) == 2 { // the late buyer's work
			return nil
		}
		select { // the first buyer's work ends only once the late one is sold
		case <-lateSold:
			return nil
		case <-time.After(20 * time.Second):
			return errors.New("the late buyer was not admitted into the running hold")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	lb := lateBuyer{holds: &holdRecorder{}}
	lb.s = lockGuardService(t, srv, path, cfg, lb.holds)
	lb.id = resetItems(t, lb.s, 10)[0]

	first := make(chan error, 1)
	go func() {
		var err error
		lb.first, err = lb.s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: lb.id, Quantity: 2, Strategy: inventory.StrategyLockGuard, Work: time.Second})
		first <- err
	}()
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 10*time.Second, time.Millisecond, "the first buyer works")
	var err error
	lb.late, err = lb.s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: lb.id, Quantity: 3, Strategy: inventory.StrategyLockGuard, Work: time.Second})
	require.NoError(t, err)
	close(lateSold)
	require.NoError(t, <-first)
	require.Eventually(t, func() bool { return len(lb.holds.get()) > 0 }, 10*time.Second, time.Millisecond, "the hold is over")
	return lb
}

// Streaming holds in two processes, with bursts of buyers and work: nothing oversold, every
// success is one order, each token written by one transaction and in commit order, and holds
// sold more than one batch each.
func TestStreamHoldBurstAcrossProcesses(t *testing.T) {
	forEachBackend(t, testStreamHoldBurstAcrossProcesses)
}

func testStreamHoldBurstAcrossProcesses(t *testing.T, be backend) {
	srv := redistest.Start(t)
	_, path := openDB(t, be)
	holds := &holdRecorder{}
	a := streamService(t, be, srv, path, 200*time.Millisecond, holds, nil)
	b := streamService(t, be, srv, path, 200*time.Millisecond, nil, nil)
	id := resetItems(t, a, 150)[0]
	o := burstWith(t, []*inventory.Service{a, b}, inventory.StrategyLockGuard, id, 240, func(i int) time.Duration {
		return time.Duration(5+i%4*10) * time.Millisecond // works of different lengths finish apart
	})
	assertSafe(t, a, id, o)
	orders := ordersOf(t, a, id)
	assertFenceOrder(t, orders)
	assert.Equal(t, 0, statsOf(t, a, id).Stock, "sold out")
	batches := map[int64]bool{}
	for _, ord := range orders {
		batches[ord.BatchID] = true
	}
	assert.Less(t, len(holds.get()), len(batches), "a hold of process a wrote more than once")
}

// A streaming hold of a hot item closes its door after the window and releases the lock: a cart
// of that item, in the same process or another, gets the lock within a bounded time while buyers
// keep the item busy.
func TestCheckoutNotStarvedByStreamingHold(t *testing.T) {
	be := sqliteBackend // the cart's write is tested on both backends in checkout_test.go
	srv := redistest.Start(t)
	_, path := openDB(t, be)
	s := streamService(t, be, srv, path, 200*time.Millisecond, nil, nil)
	ids := resetItems(t, s, 1_000_000, 100)
	t.Run("same process", func(t *testing.T) { notStarved(t, s, s, ids) })
	t.Run("another process", func(t *testing.T) { notStarved(t, s, cartService(t, openPath(t, path), srv, nil), ids) })
}
