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
	"github.com/stockguard/stockguard/models"
)

// countingMulti counts the lock holds taken through it.
type countingMulti struct {
	inventory.MultiLocker
	n *atomic.Int32
}

func (c countingMulti) ObtainMany(ctx context.Context, keys []inventory.KeyFloor) (inventory.MultiHeld, error) {
	c.n.Add(1)
	return c.MultiLocker.ObtainMany(ctx, keys)
}

// A cart with a line its item cannot serve is refused on the stock read, before any lock or
// work, naming every short line; one that fits is sold (with its work). The units of an expired
// hold count as available: a cart that needs them is not refused on the read.
func TestCartShortOnReadSpendsNothing(t *testing.T) {
	forEachBackend(t, testCartShortOnReadSpendsNothing)
}

func testCartShortOnReadSpendsNothing(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	lc := lockClient(t, srv)
	var worked, locked atomic.Int32
	l := inventory.NewLocker(lc)
	s := newService(t, inventory.Config{DB: db, Locker: l, Multi: countingMulti{l.(inventory.MultiLocker), &locked},
		Sleep: func(ctx context.Context, d time.Duration) error { worked.Add(1); return nil }})
	t.Cleanup(func() { _ = s.Close() })
	ids := resetItems(t, s, 0, 2, 5)
	ctx := t.Context()

	for _, strategy := range []string{inventory.StrategyLockGuard, inventory.StrategyGuard} {
		_, err := s.Checkout(ctx, inventory.CheckoutRequest{Strategy: strategy, Work: 10 * time.Millisecond,
			Lines: lines(ids[0], 1, ids[1], 3, ids[2], 1)})
		var short *inventory.ShortLinesError
		require.True(t, errors.As(err, &short), "%s: %v", strategy, err)
		assert.Equal(t, []inventory.ShortLine{{ItemID: ids[0], Requested: 1, Available: 0}, {ItemID: ids[1], Requested: 3, Available: 2}},
			short.Lines, "%s: every short line named", strategy)
	}
	assert.Zero(t, worked.Load(), "no work spent on a cart refused on the read")
	assert.Zero(t, locked.Load(), "no lock taken for it")

	h, err := s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(ids[1], 2), TTL: inventory.MinHoldTTL})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := s.GetHold(ctx, h.ID)
		return err == nil && got.Status == models.HoldExpired
	}, 30*time.Second, 50*time.Millisecond, "the hold expires")
	worked.Store(0)
	locked.Store(0)
	rec, err := s.Checkout(ctx, inventory.CheckoutRequest{Work: 10 * time.Millisecond, Lines: lines(ids[1], 2, ids[2], 1)})
	require.NoError(t, err, "the expired hold's units are available")
	assert.Len(t, rec.Lines, 2)
	assert.EqualValues(t, 1, worked.Load())
	assert.EqualValues(t, 1, locked.Load())
}

// Two carts of one hold want the last unit of their other item: the write refuses the second
// alone, naming that item, and commits the first with the hold's single purchase in one
// transaction. Both carts passed the stock read (one unit was there for each), so the refusal
// is the write's (writeSales reads the other items and fits each cart beside those before it).
func TestCartShortAtWriteRefusedAlone(t *testing.T) {
	forEachBackend(t, testCartShortAtWriteRefusedAlone)
}

func testCartShortAtWriteRefusedAlone(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	lc := lockClient(t, srv)
	other := lockClient(t, srv)
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc)})
	t.Cleanup(func() { _ = s.Close() })
	ids := resetItems(t, s, 100, 1)
	a, b := ids[0], ids[1]

	// Item a's lock is held elsewhere until the three requests wait in a's queue: one hold
	// admits them together, in arrival order.
	held, err := other.Obtain(t.Context(), inventory.ItemLockName(a))
	require.NoError(t, err)
	ctx := context.Background()
	var first, second inventory.CartReceipt
	var errFirst, errSecond, errPurchase error
	done := make(chan struct{}, 3)
	queued := func(n int) {
		require.Eventually(t, func() bool { return inventory.Queued(s, inventory.StrategyLockGuard, a) == n },
			10*time.Second, time.Millisecond, "%d requests queued at item %d", n, a)
	}
	go func() {
		first, errFirst = s.Checkout(ctx, inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard, Lines: lines(a, 1, b, 1)})
		done <- struct{}{}
	}()
	queued(1)
	go func() {
		second, errSecond = s.Checkout(ctx, inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard, Lines: lines(a, 2, b, 1)})
		done <- struct{}{}
	}()
	queued(2)
	go func() {
		_, errPurchase = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: a, Quantity: 3, Strategy: inventory.StrategyLockGuard})
		done <- struct{}{}
	}()
	queued(3)
	require.NoError(t, held.Release(t.Context()))
	for range 3 {
		<-done
	}

	require.NoError(t, errFirst, "the first cart takes b's last unit")
	assert.NotZero(t, first.OrderID)
	var short *inventory.ShortLinesError
	require.ErrorAs(t, errSecond, &short, "the second cart, refused alone")
	assert.Equal(t, []inventory.ShortLine{{ItemID: b, Requested: 1, Available: 0}}, short.Lines)
	assert.Zero(t, second.OrderID)
	require.NoError(t, errPurchase, "the hold's single purchase")
	assert.Equal(t, 96, statsOf(t, s, a).Stock, "a: the first cart's 1 and the purchase's 3")
	assert.Equal(t, 0, statsOf(t, s, b).Stock)
	orders := ordersOf(t, s, a)
	require.Len(t, orders, 2)
	assert.Equal(t, orders[0].BatchID, orders[1].BatchID, "one write transaction: one batch id")
	assertBalanced(t, s)
}
