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
)

// staleOther is a Locker whose one-attempt locks of one item carry a stale fencing token (1):
// what a hold that takes a cart's other lock gets when Redis lost that item's counter.
type staleOther struct {
	inventory.Locker
	item int64
}

type tryLocker interface {
	TryObtain(ctx context.Context, key string, floor int64) (inventory.Held, error)
}

func (l staleOther) TryObtain(ctx context.Context, key string, floor int64) (inventory.Held, error) {
	h, err := l.Locker.(tryLocker).TryObtain(ctx, key, floor)
	if err != nil || key != inventory.ItemLockName(l.item) {
		return h, err
	}
	return staleHeld{h}, nil
}

type staleHeld struct{ inventory.Held }

func (staleHeld) Token() int64 { return 1 }

// A stale lock of a cart's other item drops only the carts that need it: the hold's single
// purchases and its other carts are written, each all or nothing, and the item's row is
// untouched by the refused cart (the fence, fence_token < token, refuses it; its one retry
// meets the same token and it answers ErrLockLost).
func TestCartStaleOtherLockDropsOnlyItsCarts(t *testing.T) {
	forEachBackend(t, testCartStaleOtherLockDropsOnlyItsCarts)
}

func testCartStaleOtherLockDropsOnlyItsCarts(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	lc := lockClient(t, srv)
	other := lockClient(t, srv)
	obs := &anchorCount{carts: map[int64]int{}}
	s0 := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc)})
	ids := resetItems(t, s0, 100, 100, 100)
	a, b, c := ids[0], ids[1], ids[2]
	// Item b's fence is 2 once two lock+guard purchases wrote it: token 1 is stale on it.
	for range 2 {
		_, err := s0.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: b, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		require.NoError(t, err)
	}
	require.NoError(t, s0.Close())
	s := newService(t, inventory.Config{DB: db, Locker: staleOther{inventory.NewLocker(lc), b}, Holds: obs})
	t.Cleanup(func() { _ = s.Close() })

	// Item a's lock is held elsewhere while the three requests queue at a, so that one hold
	// most likely admits them together.
	held, err := other.Obtain(t.Context(), inventory.ItemLockName(a))
	require.NoError(t, err)
	var wg sync.WaitGroup
	var errAB, errAC, errA error
	ctx := context.Background()
	wg.Go(func() {
		_, errAB = s.Checkout(ctx, inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard, Lines: lines(a, 1, b, 1)})
	})
	wg.Go(func() {
		_, errAC = s.Checkout(ctx, inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard, Lines: lines(a, 2, c, 2)})
	})
	wg.Go(func() {
		_, errA = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: a, Quantity: 3, Strategy: inventory.StrategyLockGuard})
	})
	time.Sleep(100 * time.Millisecond) // not asserted on: only makes one batch likely
	require.NoError(t, held.Release(t.Context()))
	wg.Wait()
	t.Logf("carts sold at a: %d", obs.of(a))
	assert.ErrorIs(t, errAB, inventory.ErrLockLost, "the cart that needs b's stale lock")
	assert.NoError(t, errAC, "the other cart of the hold")
	assert.NoError(t, errA, "the single purchase of the hold")
	assert.Equal(t, 95, statsOf(t, s, a).Stock, "a: the purchase's 3 and the cart {a,c}'s 2")
	assert.Equal(t, 98, statsOf(t, s, b).Stock, "b: only the two purchases before")
	assert.Equal(t, 98, statsOf(t, s, c).Stock)
	// When one hold wrote the purchase and the cart {a,c} (most likely), their orders share its
	// one batch id: one write transaction.
	orders, err := s.ListOrders(t.Context(), inventory.OrderQuery{ItemID: a, Limit: 10})
	require.NoError(t, err)
	require.Len(t, orders, 2)
	obs.mu.Lock()
	together := obs.mostSales == 2
	obs.mu.Unlock()
	if together {
		assert.Equal(t, orders[0].BatchID, orders[1].BatchID, "one batch id for the orders of one hold")
	}
	t.Logf("one hold wrote both: %v", together)
	assertBalanced(t, s)
}

// A streaming hold admits carts in every round, and each of its writes fences every item it
// touches with a token of its own: the anchor's and the other item's locks each draw a new
// token (NextToken) for every write after the first, so no token of either item is written
// by two transactions (the strict fence), and every cart sells.
func TestCartsInStreamingHold(t *testing.T) { forEachBackend(t, testCartsInStreamingHold) }

func testCartsInStreamingHold(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	lc := lockClient(t, srv)
	obs := &anchorCount{carts: map[int64]int{}}
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), StreamHold: time.Second, Holds: obs})
	t.Cleanup(func() { _ = s.Close() })
	ids := resetItems(t, s, 100, 100)
	a, b := ids[0], ids[1]
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { // works of different lengths: the hold writes several times
			_, errs[i] = s.Checkout(context.Background(), inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard,
				Lines: lines(a, 1, b, 1), Work: time.Duration(1+i*15) * time.Millisecond})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "cart %d", i)
	}
	require.NoError(t, s.Close()) // its workers have ended: every hold was reported
	orders := ordersOf(t, s, a)
	require.Len(t, orders, len(errs))
	oids := make([]int64, len(orders))
	batchOf := make(map[int64]int64, len(orders))
	for i, o := range orders {
		oids[i], batchOf[o.ID] = o.ID, o.BatchID
	}
	lineOf, err := s.OrderLines(t.Context(), oids)
	require.NoError(t, err)
	writes := map[int64]bool{}
	for _, item := range []int64{a, b} {
		tokenBatch := map[int64]int64{} // each token of the item: the one batch that wrote it
		for id, ls := range lineOf {
			writes[batchOf[id]] = true
			for _, l := range ls {
				if l.ItemID != item {
					continue
				}
				require.Positive(t, l.FenceToken)
				if prev, ok := tokenBatch[l.FenceToken]; ok {
					assert.Equal(t, prev, batchOf[id], "item %d: token %d written by two transactions", item, l.FenceToken)
				}
				tokenBatch[l.FenceToken] = batchOf[id]
			}
		}
	}
	holds := obs.holdsWriting()
	t.Logf("%d carts in %d writes of %d holds", len(orders), len(writes), holds)
	assert.Greater(t, len(writes), holds, "a hold wrote more than once: its locks drew new tokens")
	assert.Equal(t, 92, statsOf(t, s, b).Stock)
	assertBalanced(t, s)
}
