package inventory_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// aloneService is a lock+guard Service on a real lock whose holds stream while nobody else
// wants their locks (StreamAlone, no StreamHold window): the storefront's default.
func aloneService(t *testing.T, srv *redistest.Server, path string, holds *holdRecorder,
	sleep func(context.Context, time.Duration) error) *inventory.Service {
	t.Helper()
	return lockGuardService(t, srv, path, inventory.Config{StreamAlone: true, Sleep: sleep}, holds)
}

// With no window at all, a hold that nobody else wants admits a buyer who arrives while it
// works: the late buyer is sold while the first buyer's work is still running (it ends only
// then), both under one hold, each write on its own token.
func TestStreamAloneAdmitsLateBuyers(t *testing.T) {
	forEachBackend(t, testStreamAloneAdmitsLateBuyers)
}

func testStreamAloneAdmitsLateBuyers(t *testing.T, be backend) {
	lb := admitLateBuyer(t, be, inventory.Config{StreamAlone: true})
	assert.Equal(t, []int{2}, lb.holds.get(), "one hold sold to both")
	orders := ordersOf(t, lb.s, lb.id)
	require.Len(t, orders, 2)
	assertFenceOrder(t, orders)
	assert.Equal(t, 5, statsOf(t, lb.s, lb.id).Stock)
}

// A hold that streams for a busy process lets go as soon as another process waits for one of
// its locks: the hot item's own lock (a purchase of it in process b), or the lock of a cold
// item it took for a cart ({hot, cold} carts in process a, a purchase of the cold item in b).
// While b's buyer waits, a sells only what its hold had admitted before it noticed (at most
// its buyers in flight, 32, and the few admitted between two looks): without the look, the
// hold would stream on for as long as a's buyers keep coming.
func TestStreamAloneLetsGoForAnotherProcess(t *testing.T) {
	be := sqliteBackend // the write is the coalesced one, tested on both backends elsewhere
	srv := redistest.Start(t)
	_, path := openDB(t, be)
	a := aloneService(t, srv, path, nil, nil)
	b := aloneService(t, srv, path, nil, nil)
	ids := resetItems(t, a, 1_000_000, 1_000_000)
	hot, cold := ids[0], ids[1]

	for _, tc := range []struct {
		name string
		buy  func(ctx context.Context) error // one of a's buyers
		item int64                           // what b buys
	}{
		{"the anchor's lock", func(ctx context.Context) error {
			_, err := a.Purchase(ctx, inventory.PurchaseRequest{ItemID: hot, Quantity: 1, Work: 5 * time.Millisecond})
			return err
		}, hot},
		{"a cart's other lock", func(ctx context.Context) error {
			_, err := a.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(hot, 1, cold, 1), Work: 5 * time.Millisecond})
			return err
		}, cold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stop := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			var sold atomic.Int64
			for range 32 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if tc.buy(ctx) == nil {
							sold.Add(1)
						}
					}
				})
			}
			defer func() { stop(); wg.Wait() }()
			require.Eventually(t, func() bool { return sold.Load() > 100 }, 20*time.Second, 10*time.Millisecond, "a sells")
			for i := range 5 {
				before := sold.Load()
				bctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
				_, err := b.Purchase(bctx, inventory.PurchaseRequest{ItemID: tc.item, Quantity: 1})
				cancel()
				require.NoError(t, err, "b's purchase %d", i)
				during := sold.Load() - before
				t.Logf("b's purchase %d: a sold %d while it waited", i, during)
				assert.LessOrEqual(t, during, int64(3*32), "a's hold let go once b waited")
			}
			stop()
			wg.Wait()
			assertBalanced(t, a)
			assertFenceOrder(t, ordersOf(t, a, tc.item))
		})
	}
}

// A hold that streams for long lets go of a cart's other lock once no cart has needed it for a
// while: carts {hot, a}, then only {hot, b}; a's lock is given back while the hold goes on.
func TestStreamAloneLetsIdleOtherLocksGo(t *testing.T) {
	srv := redistest.Start(t)
	_, path := openDB(t, sqliteBackend)
	holds := &holdRecorder{}
	s := aloneService(t, srv, path, holds, nil)
	ids := resetItems(t, s, 1_000_000, 1_000_000, 1_000_000)
	hot, a, b := ids[0], ids[1], ids[2]
	rdb := srv.Client(t)
	held := func(id int64) bool {
		n, err := rdb.Exists(t.Context(), locking.KeysOf(lockPrefix, inventory.ItemLockName(id)).Hash).Result()
		require.NoError(t, err)
		return n == 1
	}
	var other atomic.Int64
	other.Store(a)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _ = s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(hot, 1, other.Load(), 1), Work: 5 * time.Millisecond})
			}
		})
	}
	// Two buyers of the hot item whose works (1 s each) overlap keep a purchase at work, so the
	// hold never runs out of work and ends on its own.
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 500 * time.Millisecond)
			for ctx.Err() == nil {
				_, _ = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: hot, Quantity: 1, Work: time.Second})
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	require.Eventually(t, func() bool { return held(hot) && held(a) }, 10*time.Second, time.Millisecond, "the hold took a's lock for its carts")
	time.Sleep(600 * time.Millisecond) // both long buyers at work
	other.Store(b)
	// The hot lock's owner: a new hold has a new one.
	owner := func() string {
		fields, err := rdb.HKeys(t.Context(), locking.KeysOf(lockPrefix, inventory.ItemLockName(hot)).Hash).Result()
		require.NoError(t, err)
		return strings.Join(fields, ",")
	}
	var before string
	require.Eventually(t, func() bool { before = owner(); return before != "" }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return !held(a) && held(b) }, 10*time.Second, 5*time.Millisecond, "a's lock is given back")
	t.Logf("holds ended meanwhile: %d", len(holds.get()))
	assert.Equal(t, before, owner(), "while the hold that took it streams on")
	stop()
	wg.Wait()
	assertBalanced(t, s)
}

// A streaming hold's write runs beside the hold: a buyer who arrives while the hold's write
// waits for the database (here for another transaction's row lock) is admitted, and its work
// starts, at once, not once that write is over. Both are sold under the one hold, the late
// buyer by the next write, on a greater token. (On PostgreSQL, where a write that waits for a
// row lock can be seen: pg_stat_activity.)
func TestStreamAloneAdmitsDuringWrite(t *testing.T) {
	srv := redistest.Start(t)
	db, dsn := openDB(t, postgresBackend)
	lateWorks := make(chan struct{})
	var calls atomic.Int32
	holds := &holdRecorder{}
	s := lockGuardService(t, srv, dsn, inventory.Config{StreamAlone: true, WriteTimeout: time.Minute,
		Sleep: func(ctx context.Context, d time.Duration) error {
			if calls.Add(1) == 2 { // the late buyer's work
				close(lateWorks)
			}
			return nil
		}}, holds)
	id := resetItems(t, s, 10)[0]

	holder := openPath(t, dsn).Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec("SELECT id FROM items WHERE id = ? FOR UPDATE", id).Error)
	type result struct {
		rec inventory.Receipt
		err error
	}
	buy := func(quantity int) <-chan result {
		ch := make(chan result, 1)
		go func() {
			rec, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: quantity,
				Strategy: inventory.StrategyLockGuard, Work: time.Millisecond})
			ch <- result{rec, err}
		}()
		return ch
	}
	first := buy(2)
	waitingBackend(t, db, "UPDATE items") // the hold's write waits for the row
	late := buy(3)
	select { // well within the statement timeout (5s), which would end the write's wait
	case <-lateWorks:
	case <-time.After(3 * time.Second):
		t.Error("the late buyer's work did not start while the hold's write waited")
	}
	require.NoError(t, holder.Rollback().Error)
	r1, r2 := <-first, <-late
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	assert.Greater(t, r2.rec.FenceToken, r1.rec.FenceToken, "the late buyer's write came next, on a greater token")
	require.Eventually(t, func() bool { return len(holds.get()) > 0 }, 10*time.Second, time.Millisecond, "the hold is over")
	assert.Equal(t, []int{2}, holds.get(), "one hold sold to both")
	assert.Equal(t, 5, statsOf(t, s, id).Stock)
}
