package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// A lock that no replica acknowledges (locking.Options.Replicas on a Redis without replicas)
// is ErrLockNotReplicated, for the strategies that take the lock and for a cart's locks
// (ObtainMany): not a lock timeout, not unavailable, and nothing is written.
func TestLockNotReplicated(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	s, _ := lockService(t, db, srv, locking.Options{Replicas: 1, ReplicaTimeout: 10 * time.Millisecond,
		Wait: 100 * time.Millisecond}, nil)
	ids := resetItems(t, s, 5, 5)
	ctx := context.Background()
	for _, st := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: ids[0], Quantity: 1, Strategy: st})
		require.ErrorIs(t, err, inventory.ErrLockNotReplicated, st)
		assert.NotErrorIs(t, err, inventory.ErrLockTimeout, st)
		assert.NotErrorIs(t, err, inventory.ErrUnavailable, st)
	}
	_, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: []inventory.CartLine{{ItemID: ids[0], Quantity: 1},
		{ItemID: ids[1], Quantity: 1}}, Strategy: inventory.StrategyLockGuard})
	require.ErrorIs(t, err, inventory.ErrLockNotReplicated)
	for _, id := range ids {
		st := statsOf(t, s, id)
		assert.Equal(t, 5, st.Stock, "nothing written")
		assert.Zero(t, st.OrderCount)
	}
}
