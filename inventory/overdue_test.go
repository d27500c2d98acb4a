package inventory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// An abandoned hold is overdue from its expiry until a write of one of its items ends it.
func TestOverdueHoldsCountsUntilAWriteEndsThem(t *testing.T) {
	forEachBackend(t, testOverdueHoldsCountsUntilAWriteEndsThem)
}

func testOverdueHoldsCountsUntilAWriteEndsThem(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	ids := resetItems(t, s, 2, 5)
	h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{Strategy: inventory.StrategyLockGuard, TTL: time.Second, Lines: lines(ids[0], 2)})
	require.NoError(t, err)
	n, err := s.OverdueHolds(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "an active hold before its expiry is not overdue")
	time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
	n, err = s.OverdueHolds(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "past its expiry, nobody ended it")
	_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: ids[0], Quantity: 1, Strategy: inventory.StrategyLockGuard})
	require.NoError(t, err)
	n, err = s.OverdueHolds(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "the sale of its item ended it")
}
