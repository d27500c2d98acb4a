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
	"github.com/stockguard/stockguard/models"
)

// A placement whose answer was lost, sent again with its key (to this process or another on
// the same database), answers the same hold and sets nothing more aside; another cart or ttl
// under the key is refused, and so is a key that names an order, or an order under a hold's
// key (one key, one thing), each without touching the stock.
func TestHoldIdempotencyKey(t *testing.T) { forEachBackend(t, testHoldIdempotencyKey) }

func testHoldIdempotencyKey(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	s1 := cartService(t, db, srv, nil)
	s2 := cartService(t, openPath(t, path), srv, nil) // another process
	ids := resetItems(t, s1, 10, 10)
	a, b := ids[0], ids[1]
	ctx := t.Context()
	req := inventory.HoldRequest{Lines: lines(a, 2, b, 1, a, 1), TTL: 2 * time.Minute, IdempotencyKey: "h-1"}
	first, err := s1.PlaceHold(ctx, req) // its answer is "lost": the client sends it again
	require.NoError(t, err)
	assert.False(t, first.Replayed)
	for i, s := range []*inventory.Service{s1, s2} {
		again, err := s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(b, 1, a, 3), TTL: 2 * time.Minute, IdempotencyKey: "h-1"})
		require.NoError(t, err, "service %d", i+1)
		assert.True(t, again.Replayed, "service %d", i+1)
		assert.Equal(t, first.ID, again.ID)
		assert.Equal(t, models.HoldActive, again.Status)
		assert.Equal(t, first.Lines, again.Lines)
		assert.True(t, first.ExpiresAt.Equal(again.ExpiresAt))
	}
	st := statsOf(t, s1, a)
	assert.Equal(t, 3, st.HeldUnits, "set aside once")
	assert.Equal(t, 7, st.Stock)

	for _, tc := range []struct {
		name string
		req  inventory.HoldRequest
	}{
		{"another cart", inventory.HoldRequest{Lines: lines(a, 3), TTL: 2 * time.Minute, IdempotencyKey: "h-1"}},
		{"another quantity", inventory.HoldRequest{Lines: lines(a, 2, b, 1), TTL: 2 * time.Minute, IdempotencyKey: "h-1"}},
		{"another ttl", inventory.HoldRequest{Lines: lines(a, 3, b, 1), TTL: 3 * time.Minute, IdempotencyKey: "h-1"}},
		{"the default ttl", inventory.HoldRequest{Lines: lines(a, 3, b, 1), IdempotencyKey: "h-1"}},
	} {
		_, err := s2.PlaceHold(ctx, tc.req)
		assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict, tc.name)
		assert.ErrorContains(t, err, "a hold of "+itoa(a)+"x3,"+itoa(b)+"x1 (item x quantity) for 2m0s", tc.name)
	}
	_, err = s1.Purchase(ctx, inventory.PurchaseRequest{ItemID: a, Quantity: 1, Strategy: inventory.StrategyGuard, IdempotencyKey: "h-1"})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict, "a hold's key buys nothing")
	_, err = s2.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(a, 3, b, 1), IdempotencyKey: "h-1"})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict, "a hold's key sells no cart, even the hold's own")

	_, err = s1.Purchase(ctx, inventory.PurchaseRequest{ItemID: b, Quantity: 1, Strategy: inventory.StrategyGuard, IdempotencyKey: "p-1"})
	require.NoError(t, err)
	_, err = s1.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(b, 1), IdempotencyKey: "c-1"})
	require.NoError(t, err)
	for _, key := range []string{"p-1", "c-1"} {
		_, err = s2.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(b, 1), IdempotencyKey: key})
		assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict, "an order's key %s places no hold", key)
		assert.ErrorContains(t, err, "an order", key)
	}
	assert.Equal(t, 7, statsOf(t, s1, a).Stock, "no refused request touched the stock")
	assert.Equal(t, 7, statsOf(t, s1, b).Stock, "two sold, one held")
	assertBalanced(t, s1)

	_, err = s1.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(a, 1), IdempotencyKey: "bad\nkey"})
	assert.ErrorIs(t, err, inventory.ErrInvalid)
}

// The replay of a hold's key shows the hold as it stands now: confirmed (with its order),
// cancelled, or expired; none sets anything aside again.
func TestHoldKeyReplayShowsState(t *testing.T) { forEachBackend(t, testHoldKeyReplayShowsState) }

func testHoldKeyReplayShowsState(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	id := resetItems(t, s, 10)[0]
	ctx := t.Context()
	place := func(key string, ttl time.Duration) inventory.StockHold {
		t.Helper()
		h, err := s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(id, 2), TTL: ttl, IdempotencyKey: key})
		require.NoError(t, err)
		return h
	}

	confirmed := place("confirm-me", time.Minute)
	order, err := s.ConfirmHold(ctx, confirmed.ID)
	require.NoError(t, err)
	got := place("confirm-me", time.Minute)
	assert.True(t, got.Replayed)
	assert.Equal(t, models.HoldConfirmed, got.Status)
	assert.Equal(t, order.OrderID, got.OrderID)

	cancelled := place("cancel-me", time.Minute)
	require.NoError(t, s.CancelHold(ctx, cancelled.ID))
	got = place("cancel-me", time.Minute)
	assert.True(t, got.Replayed)
	assert.Equal(t, cancelled.ID, got.ID)
	assert.Equal(t, models.HoldCancelled, got.Status)

	expiring := place("expire-me", time.Second)
	time.Sleep(time.Until(expiring.ExpiresAt) + 50*time.Millisecond)
	got = place("expire-me", time.Second)
	assert.True(t, got.Replayed)
	assert.Equal(t, expiring.ID, got.ID)
	assert.Equal(t, models.HoldExpired, got.Status)
	assert.False(t, got.Now.Before(got.ExpiresAt), "expired by the database's clock")

	st := statsOf(t, s, id)
	assert.Equal(t, 2, st.SoldUnits, "the confirmed hold")
	assert.Equal(t, 2, st.HeldUnits, "the expired hold, not given back yet, set aside once")
	assert.Equal(t, 6, st.Stock)
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 8, Strategy: inventory.StrategyGuard})
	require.NoError(t, err, "the expired hold's units come back, once")
	assertBalanced(t, s)
}

// Concurrent placements of one hold under one key, spread over two processes on one database
// (each process's keyed mutex orders its own; the unique index the two): at most one hold is
// placed, every other answer is its replay, and its units are set aside once.
func TestHoldKeyConcurrentDuplicates(t *testing.T) {
	forEachBackend(t, testHoldKeyConcurrentDuplicates)
}

func testHoldKeyConcurrentDuplicates(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	s1 := cartService(t, db, srv, nil)
	s2 := cartService(t, openPath(t, path), srv, nil)
	for _, name := range cartStrategies {
		t.Run(name, func(t *testing.T) {
			ids := resetItems(t, s1, 100, 100)
			const n = 8
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				holds []inventory.StockHold
				start = make(chan struct{})
			)
			for i := range n {
				s := []*inventory.Service{s1, s2}[i%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					cart := lines(ids[0], 2, ids[1], 3)
					if i%2 == 1 { // the same cart, as another client would write it
						cart = lines(ids[1], 3, ids[0], 1, ids[0], 1)
					}
					h, err := s.PlaceHold(context.Background(), inventory.HoldRequest{Strategy: name,
						Lines: cart, IdempotencyKey: "dup-" + name})
					if assert.NoError(t, err, "placement %d", i) {
						mu.Lock()
						holds = append(holds, h)
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Len(t, holds, n)
			fresh := 0
			for _, h := range holds {
				assert.Equal(t, holds[0].ID, h.ID, "one hold")
				if !h.Replayed {
					fresh++
				}
			}
			assert.Equal(t, 1, fresh, "placed once, replayed the other times")
			for i, want := range []int{2, 3} {
				st := statsOf(t, s1, ids[i])
				assert.Equal(t, want, st.HeldUnits, "item %d: set aside once", i)
				assert.Equal(t, 100-want, st.Stock, "item %d", i)
			}
			assertBalanced(t, s1)
		})
	}
}
