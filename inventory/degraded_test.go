package inventory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// degradedService is a Service over db and a real lock client and admission semaphore on srv,
// with the given --on-redis-down policy.
func degradedService(t *testing.T, db *gorm.DB, srv *redistest.Server, policy string) *inventory.Service {
	t.Helper()
	rdb := warmClient(t, srv)
	opts := &locking.Options{KeyPrefix: lockPrefix, CallTimeout: 200 * time.Millisecond, Lease: 2 * time.Second}
	lc := locking.New(rdb, opts)
	t.Cleanup(func() { _ = lc.Close() })
	sem := locking.NewSemaphore(rdb, 64, &locking.Options{KeyPrefix: "stockguard:inflight:", CallTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = sem.Close() })
	return newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc),
		Admission: inventory.NewAdmission(sem, 0), OnRedisDown: policy})
}

// With --on-redis-down=guard, lock+guard keeps selling while Redis is down, through the
// guard alone: never oversold, no lost update, each order marked degraded with no token, the
// item's fence untouched; lock still refuses (its computed write needs the lock); the
// admission limit follows the policy; and once Redis answers again the lock is back, with a
// token above the stored fence. The default policy (fail) answers unavailable meanwhile.
func TestOnRedisDownGuard(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	a := degradedService(t, db, srv, inventory.OnRedisDownGuard)
	b := degradedService(t, db, srv, inventory.OnRedisDownGuard) // a second process
	failing := degradedService(t, db, srv, inventory.OnRedisDownFail)
	services := []*inventory.Service{a, b}
	ids := resetItems(t, a, 60, 1000)
	id, other := ids[0], ids[1]
	ctx := t.Context()

	before := burst(t, services, inventory.StrategyLockGuard, id, 12, time.Millisecond)
	require.Equal(t, 12, before.ok)
	item, err := a.GetItem(ctx, id)
	require.NoError(t, err)
	fence := item.FenceToken
	require.Positive(t, fence)
	_, err = a.Purchase(ctx, inventory.PurchaseRequest{ItemID: other, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	require.NoError(t, err)
	otherItem, err := a.GetItem(ctx, other)
	require.NoError(t, err)
	for _, o := range ordersOf(t, a, id) {
		assert.False(t, o.Degraded, "order %d sold under the lock", o.ID)
	}

	srv.Stop()
	_, err = failing.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	assert.ErrorIs(t, err, inventory.ErrUnavailable, "the default policy answers unavailable")
	_, err = a.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLock})
	assert.ErrorIs(t, err, inventory.ErrUnavailable, "lock never degrades")

	rec, err := a.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard, IdempotencyKey: "deg-1"})
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
		if o.Degraded {
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
	}, 10*time.Second, 50*time.Millisecond, "the lock is back once Redis answers")
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
