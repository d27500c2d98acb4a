package inventory_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// degradedService is a Service over db and a real lock client and admission semaphore on srv,
// with the given --on-redis-down policy. Its lock calls that failed unavailable are counted in
// unavailable (when not nil).
func degradedService(t *testing.T, db *gorm.DB, srv *redistest.Server, policy string, unavailable *atomic.Int64) *inventory.Service {
	t.Helper()
	rdb := warmClient(t, srv)
	opts := &locking.Options{KeyPrefix: lockPrefix, CallTimeout: 200 * time.Millisecond, Lease: 2 * time.Second}
	lc := locking.New(rdb, opts)
	t.Cleanup(func() { _ = lc.Close() })
	sem := locking.NewSemaphore(rdb, 64, &locking.Options{KeyPrefix: "stockguard:inflight:", CallTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = sem.Close() })
	var locker inventory.Locker = inventory.NewLocker(lc)
	if unavailable != nil {
		locker = countingLocker{locker, unavailable}
	}
	return newService(t, inventory.Config{DB: db, Locker: locker,
		Admission: inventory.NewAdmission(sem, 0), OnRedisDown: policy})
}

// countingLocker counts the Obtain calls that failed with ErrUnavailable: with Redis up, a
// lock call can still run past its CallTimeout on a loaded machine, and under the guard
// policy that purchase rightly sells degraded (a timed-out call is all an unreachable Redis
// looks like).
type countingLocker struct {
	inventory.Locker
	unavailable *atomic.Int64
}

func (c countingLocker) Obtain(ctx context.Context, key string, floor int64) (inventory.Held, error) {
	h, err := c.Locker.Obtain(ctx, key, floor)
	if errors.Is(err, inventory.ErrUnavailable) {
		c.unavailable.Add(1)
	}
	return h, err
}

// With --on-redis-down=guard, lock+guard keeps selling while Redis is down, through the
// guard alone: never oversold, no lost update, each order marked degraded with no token, the
// item's fence untouched; lock still refuses (its computed write needs the lock); the
// admission limit follows the policy; and once Redis answers again the lock is back, with a
// token above the stored fence. The default policy (fail) answers unavailable meanwhile.
func TestOnRedisDownGuard(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	var unavailable atomic.Int64 // lock calls of a and b that failed unavailable
	a := degradedService(t, db, srv, inventory.OnRedisDownGuard, &unavailable)
	b := degradedService(t, db, srv, inventory.OnRedisDownGuard, &unavailable) // a second process
	failing := degradedService(t, db, srv, inventory.OnRedisDownFail, nil)
	services := []*inventory.Service{a, b}
	ids := resetItems(t, a, 60, 1000)
	id, other := ids[0], ids[1]
	ctx := t.Context()

	// With Redis up, every order is sold under the lock, except one whose lock call timed out
	// (a loaded machine can stall a call past its 200ms CallTimeout): that one is degraded,
	// without a token, as the policy says.
	before := burst(t, services, inventory.StrategyLockGuard, id, 12, time.Millisecond)
	require.Equal(t, 12, before.ok)
	item, err := a.GetItem(ctx, id)
	require.NoError(t, err)
	fence := item.FenceToken
	require.Positive(t, fence)
	beforeOrders := map[int64]bool{}
	degradedBefore := 0
	for _, o := range ordersOf(t, a, id) {
		beforeOrders[o.ID] = true
		if o.Degraded {
			degradedBefore++
			assert.Zero(t, o.FenceToken, "degraded order %d", o.ID)
		} else {
			assert.Positive(t, o.FenceToken, "order %d sold under the lock", o.ID)
		}
	}
	assert.LessOrEqual(t, degradedBefore, int(unavailable.Load()),
		"with Redis up, an order is degraded only when its lock call failed: order(s) sold under the lock wrongly marked")
	// The other item's fence holds a token of the lock, for the floor check after the restart.
	var rec inventory.Receipt
	require.Eventually(t, func() bool {
		rec, err = a.Purchase(ctx, inventory.PurchaseRequest{ItemID: other, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		return err != nil || !rec.Degraded // a degraded one's lock call timed out: buy again
	}, 30*time.Second, 10*time.Millisecond, "a purchase of the other item sold under the lock")
	require.NoError(t, err)
	otherItem, err := a.GetItem(ctx, other)
	require.NoError(t, err)
	require.Positive(t, otherItem.FenceToken)

	srv.Stop()
	_, err = failing.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	assert.ErrorIs(t, err, inventory.ErrUnavailable, "the default policy answers unavailable")
	_, err = a.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLock})
	assert.ErrorIs(t, err, inventory.ErrUnavailable, "lock never degrades")

	rec, err = a.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard, IdempotencyKey: "deg-1"})
	require.NoError(t, err)
	assert.True(t, rec.Degraded)
	assert.Zero(t, rec.FenceToken)
	assert.Equal(t, inventory.StrategyLockGuard, rec.Strategy, "the order keeps its strategy")
	replay, err := b.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard, IdempotencyKey: "deg-1"})
	require.NoError(t, err)
	assert.True(t, replay.Replayed && replay.Degraded && replay.OrderID == rec.OrderID, "the replay shows the stored flag")

	// More demand than stock, from two processes at once, with Redis down.
	during := burst(t, services, inventory.StrategyLockGuard, id, 40, time.Millisecond)
	assert.Positive(t, during.ok)
	assert.Positive(t, during.errs["sold out"]+during.errs["insufficient stock"], "the guard refused what did not fit")
	item, err = a.GetItem(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, fence, item.FenceToken, "the fence is untouched by degraded writes")
	degraded := 0
	for _, o := range ordersOf(t, a, id) {
		if o.Degraded && !beforeOrders[o.ID] {
			degraded++
			assert.Zero(t, o.FenceToken, "order %d", o.ID)
		}
	}
	assert.Equal(t, during.ok+1, degraded, "every order sold while Redis was down is marked")

	srv.Restart(t)
	require.Eventually(t, func() bool {
		rec, err = a.Purchase(ctx, inventory.PurchaseRequest{ItemID: other, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		// The first tries after the restart may still degrade: go-redis backs off dialling
		// a node that refused, for about a second.
		return err != nil || !rec.Degraded
	}, 30*time.Second, 50*time.Millisecond, "the lock is back once Redis answers")
	require.NoError(t, err)
	assert.False(t, rec.Degraded, "sold under the lock again")
	assert.Greater(t, rec.FenceToken, otherItem.FenceToken, "the floor keeps the new token above the stored fence (Redis restarted empty)")
	st := statsOf(t, a, id)
	assert.GreaterOrEqual(t, st.Stock, 0)
	assert.Zero(t, st.OversoldUnits)
	assert.Equal(t, st.InitialStock, st.Stock+st.SoldUnits, "no lost update")
}

func TestOnRedisDownValidated(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	_, err := inventory.NewService(inventory.Config{DB: db, OnRedisDown: "maybe"})
	assert.Error(t, err)
	assert.True(t, inventory.ValidOnRedisDown(""))
}
