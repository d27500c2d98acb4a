package inventory_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/models"
)

// A hold takes its units off the stock: nobody else can buy them until it is cancelled, which
// gives them back (once: cancelling again changes nothing).
func TestHoldBlocksSaleCancelFrees(t *testing.T) { forEachBackend(t, testHoldBlocksSaleCancelFrees) }

func testHoldBlocksSaleCancelFrees(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range cartStrategies {
		t.Run(name, func(t *testing.T) {
			db, _ := openDB(t, be)
			s := cartService(t, db, srv, nil)
			ids := resetItems(t, s, 3, 5)
			a, b := ids[0], ids[1]
			h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{Strategy: name, Lines: lines(a, 3, b, 1)})
			require.NoError(t, err)
			assert.Equal(t, models.HoldActive, h.Status)
			assert.WithinDuration(t, time.Now().Add(inventory.DefaultHoldTTL), h.ExpiresAt, time.Minute)
			require.Len(t, h.Lines, 2)
			st := statsOf(t, s, a)
			assert.Equal(t, 0, st.Stock)
			assert.Equal(t, 3, st.HeldUnits)
			assertBalanced(t, s)

			_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 1, Strategy: name})
			assert.ErrorIs(t, err, inventory.ErrSoldOut, "held units are not for sale")
			_, err = s.Checkout(t.Context(), inventory.CheckoutRequest{Strategy: name, Lines: lines(a, 1)})
			assert.ErrorIs(t, err, inventory.ErrInsufficientStock)
			_, err = s.PlaceHold(t.Context(), inventory.HoldRequest{Strategy: name, Lines: lines(a, 1, b, 1)})
			var short *inventory.ShortLinesError
			require.ErrorAs(t, err, &short)
			assert.Equal(t, []inventory.ShortLine{{ItemID: a, Requested: 1, Available: 0}}, short.Lines)

			require.NoError(t, s.CancelHold(t.Context(), h.ID))
			require.NoError(t, s.CancelHold(t.Context(), h.ID), "idempotent")
			got, err := s.GetHold(t.Context(), h.ID)
			require.NoError(t, err)
			assert.Equal(t, models.HoldCancelled, got.Status)
			assert.Equal(t, 3, statsOf(t, s, a).Stock, "given back once")
			assert.Equal(t, 5, statsOf(t, s, b).Stock)
			_, err = s.ConfirmHold(t.Context(), h.ID)
			assert.ErrorIs(t, err, inventory.ErrHoldNotActive)

			_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 3, Strategy: name})
			require.NoError(t, err)
			assertBalanced(t, s)
		})
	}
}

// Confirming turns the hold into an order without touching the stock; confirming again
// returns the same order; a confirmed hold cannot be cancelled.
func TestHoldConfirmIdempotent(t *testing.T) { forEachBackend(t, testHoldConfirmIdempotent) }

func testHoldConfirmIdempotent(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	ids := resetItems(t, s, 4, 4)
	h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{Lines: lines(ids[1], 1, ids[0], 2)})
	require.NoError(t, err)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		recs []inventory.CartReceipt
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := s.ConfirmHold(context.Background(), h.ID)
			assert.NoError(t, err)
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
		}()
	}
	wg.Wait()
	fresh := 0
	for _, r := range recs {
		assert.Equal(t, recs[0].OrderID, r.OrderID, "one order")
		assert.Equal(t, h.ID, r.HoldID)
		assert.Len(t, r.Lines, 2)
		if !r.Replayed {
			fresh++
		}
	}
	assert.Equal(t, 1, fresh)
	st := statsOf(t, s, ids[0])
	assert.Equal(t, 2, st.Stock, "confirm does not touch the stock")
	assert.Equal(t, 2, st.SoldUnits)
	assert.Zero(t, st.HeldUnits)
	got, err := s.GetHold(t.Context(), h.ID)
	require.NoError(t, err)
	assert.Equal(t, models.HoldConfirmed, got.Status)
	assert.Equal(t, recs[0].OrderID, got.OrderID)
	assert.ErrorIs(t, s.CancelHold(t.Context(), h.ID), inventory.ErrHoldNotActive)
	assert.ErrorIs(t, s.CancelHold(t.Context(), 9999), inventory.ErrNotFound)
	_, err = s.ConfirmHold(t.Context(), 9999)
	assert.ErrorIs(t, err, inventory.ErrNotFound)
	assertBalanced(t, s)
}

// A hold past its ttl, by the database's clock, frees its units for the next sale without any
// background job: that sale's transaction gives them back first. Confirming it then is
// ErrHoldExpired.
func TestHoldExpiryFreesWithoutJob(t *testing.T) { forEachBackend(t, testHoldExpiryFreesWithoutJob) }

func testHoldExpiryFreesWithoutJob(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range cartStrategies {
		t.Run(name, func(t *testing.T) {
			db, _ := openDB(t, be)
			s := cartService(t, db, srv, nil)
			ids := resetItems(t, s, 2, 5)
			a, b := ids[0], ids[1]
			h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{Strategy: name, TTL: time.Second, Lines: lines(a, 2, b, 1)})
			require.NoError(t, err)
			_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 1, Strategy: name})
			require.ErrorIs(t, err, inventory.ErrSoldOut)
			time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
			got, err := s.GetHold(t.Context(), h.ID)
			require.NoError(t, err)
			assert.Equal(t, models.HoldExpired, got.Status, "expired by the clock, before anyone cleaned it")
			assert.Equal(t, 2, statsOf(t, s, a).HeldUnits, "its units are not back yet")

			rec, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 2, Strategy: name})
			require.NoError(t, err, "the sale gives the expired hold's units back first")
			assert.Equal(t, 0, rec.Remaining)
			st := statsOf(t, s, b)
			assert.Equal(t, 5, st.Stock, "every line of the hold came back, item b too")
			assert.Zero(t, st.HeldUnits)

			_, err = s.ConfirmHold(t.Context(), h.ID)
			assert.ErrorIs(t, err, inventory.ErrHoldExpired)
			require.NoError(t, s.CancelHold(t.Context(), h.ID), "cancelling an expired hold does nothing")
			assert.Equal(t, 5, statsOf(t, s, b).Stock, "nothing given back twice")
			assertBalanced(t, s)
		})
	}
}

// Confirming an expired hold that nobody cleaned is 410 and gives its units back.
func TestHoldConfirmAfterExpiry(t *testing.T) { forEachBackend(t, testHoldConfirmAfterExpiry) }

func testHoldConfirmAfterExpiry(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	id := resetItems(t, s, 3)[0]
	h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{TTL: time.Second, Lines: lines(id, 3)})
	require.NoError(t, err)
	time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
	_, err = s.ConfirmHold(t.Context(), h.ID)
	require.ErrorIs(t, err, inventory.ErrHoldExpired)
	st := statsOf(t, s, id)
	assert.Equal(t, 3, st.Stock)
	assert.Zero(t, st.HeldUnits)
	assert.Zero(t, st.SoldUnits)
	_, err = s.ConfirmHold(t.Context(), h.ID)
	require.ErrorIs(t, err, inventory.ErrHoldExpired)
	assert.Equal(t, 3, statsOf(t, s, id).Stock, "given back once")
}

// Two processes (two Services on one database) that meet the same expired hold at once, in a
// sale, a hold, a confirm and a cancel each, give its units back once.
func TestExpiredHoldCleanedOnceAcrossProcesses(t *testing.T) {
	forEachBackend(t, testExpiredHoldCleanedOnceAcrossProcesses)
}

func testExpiredHoldCleanedOnceAcrossProcesses(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	s1 := cartService(t, db, srv, nil)
	s2 := cartService(t, openPath(t, path), srv, nil)
	for round := range 3 {
		ids := resetItems(t, s1, 5, 5)
		a, b := ids[0], ids[1]
		h, err := s1.PlaceHold(t.Context(), inventory.HoldRequest{TTL: time.Second, Lines: lines(a, 5, b, 5)})
		require.NoError(t, err)
		time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range []*inventory.Service{s1, s2, s1, s2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx := context.Background()
				switch i {
				case 0:
					_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: a, Quantity: 1, Strategy: inventory.StrategyGuard})
					assert.NoError(t, err)
				case 1:
					_, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(b, 1)})
					assert.NoError(t, err)
				case 2:
					_, err := s.ConfirmHold(ctx, h.ID)
					assert.ErrorIs(t, err, inventory.ErrHoldExpired)
				case 3:
					assert.NoError(t, s.CancelHold(ctx, h.ID))
				}
			}()
		}
		close(start)
		wg.Wait()
		assert.Equal(t, 4, statsOf(t, s1, a).Stock, "round %d: 5 given back once, 1 sold", round)
		assert.Equal(t, 4, statsOf(t, s1, b).Stock, "round %d", round)
		assertBalanced(t, s1)
	}
}

func TestHoldValidation(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	s := cartService(t, db, srv, nil)
	id := resetItems(t, s, 5)[0]
	for _, tc := range []struct {
		req inventory.HoldRequest
		msg string
	}{
		{inventory.HoldRequest{Lines: lines(id, 1), TTL: 500 * time.Millisecond}, "ttl must be from 1s to 1h0m0s"},
		{inventory.HoldRequest{Lines: lines(id, 1), TTL: 2 * time.Hour}, "ttl must be from"},
		{inventory.HoldRequest{Lines: lines(id, 1), Strategy: inventory.StrategyNaive}, "does not sell carts"},
		{inventory.HoldRequest{}, "at least one line"},
	} {
		_, err := s.PlaceHold(t.Context(), tc.req)
		assert.ErrorIs(t, err, inventory.ErrInvalid)
		assert.ErrorContains(t, err, tc.msg)
	}
	_, err := s.GetHold(t.Context(), 0)
	assert.ErrorIs(t, err, inventory.ErrInvalid)
	_, err = s.GetHold(t.Context(), 12345)
	assert.ErrorIs(t, err, inventory.ErrNotFound)
}

// The unguarded writes (naive, local, lock) give an expired hold's units back first too: the
// stock they read counted them.
func TestHoldExpiryUnguardedWrites(t *testing.T) { forEachBackend(t, testHoldExpiryUnguardedWrites) }

func testHoldExpiryUnguardedWrites(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	for _, name := range []string{inventory.StrategyNaive, inventory.StrategyLocal, inventory.StrategyLock} {
		ids := resetItems(t, s, 2, 3)
		h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{TTL: time.Second, Lines: lines(ids[0], 2, ids[1], 3)})
		require.NoError(t, err)
		_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: ids[0], Quantity: 1, Strategy: name})
		require.ErrorIs(t, err, inventory.ErrSoldOut, name)
		time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
		rec, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: ids[0], Quantity: 1, Strategy: name})
		require.NoError(t, err, name)
		assert.Equal(t, 1, rec.Remaining, name)
		assert.Equal(t, 1, statsOf(t, s, ids[0]).Stock, name)
		assert.Equal(t, 3, statsOf(t, s, ids[1]).Stock, "%s: the hold's other line came back", name)
		assertBalanced(t, s)
	}
}

// Sales, carts, holds, confirms and cancels of two processes, at once, over items that many
// expired holds share: every transaction gives back the expired holds it meets first, hold
// rows then item rows in ascending order, so PostgreSQL finds no deadlock (no busy retry),
// and every expired hold's units come back exactly once.
func TestHoldsCleanupUnderLoadNeverDeadlocks(t *testing.T) {
	forEachBackend(t, testHoldsCleanupUnderLoadNeverDeadlocks)
}

func testHoldsCleanupUnderLoadNeverDeadlocks(t *testing.T, be backend) {
	srv := redistest.Start(t)
	var retries atomic.Int64
	log := slog.New(countingHandler{words: []string{"busy", "lost lock"}, n: &retries})
	db, path := openDB(t, be)
	s1 := cartService(t, db, srv, log)
	s2 := cartService(t, openPath(t, path), srv, log)
	ids := resetItems(t, s1, 1000, 1000, 1000, 1000)
	var holds []int64
	var latest time.Time
	for i := range 24 {
		h, err := s1.PlaceHold(t.Context(), inventory.HoldRequest{TTL: time.Second,
			Lines: lines(ids[i%4], 1+int64(i%3), ids[(i+1+i%2)%4], 2, ids[(i+3)%4], 1)})
		require.NoError(t, err)
		holds = append(holds, h.ID)
		latest = h.ExpiresAt
	}
	time.Sleep(time.Until(latest) + 50*time.Millisecond)
	var wg sync.WaitGroup
	start := make(chan struct{})
	ctx := context.Background()
	for w := range 8 {
		s := []*inventory.Service{s1, s2}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range 12 {
				k := w*12 + i
				var err error
				switch w % 4 {
				case 0:
					_, err = s.Checkout(ctx, inventory.CheckoutRequest{Strategy: cartStrategies[k%2],
						Lines: lines(ids[(k+3)%4], 1, ids[k%4], 1, ids[(k+2)%4], 1)})
				case 1:
					_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: ids[k%4], Quantity: 1, Strategy: cartStrategies[k%2]})
				case 2:
					var h inventory.StockHold
					h, err = s.PlaceHold(ctx, inventory.HoldRequest{Strategy: cartStrategies[k%2], Lines: lines(ids[(k+1)%4], 1, ids[k%4], 1)})
					if err == nil && k%2 == 0 {
						err = s.CancelHold(ctx, h.ID)
					} else if err == nil {
						_, err = s.ConfirmHold(ctx, h.ID)
					}
				case 3:
					id := holds[k%len(holds)]
					if k%2 == 0 {
						err = s.CancelHold(ctx, id)
					} else if _, err = s.ConfirmHold(ctx, id); errors.Is(err, inventory.ErrHoldExpired) {
						err = nil
					}
				}
				assert.NoError(t, err, "worker %d, op %d", w, i)
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Zero(t, retries.Load(), "no deadlock or busy retried")
	for _, id := range holds {
		h, err := s1.GetHold(t.Context(), id)
		require.NoError(t, err)
		assert.Contains(t, []string{models.HoldExpired, models.HoldCancelled}, h.Status, "hold %d", id)
	}
	all, err := s1.Stats(t.Context())
	require.NoError(t, err)
	for _, st := range all {
		assert.Zero(t, st.HeldUnits, "item %d: every hold ended", st.ItemID)
	}
	assertBalanced(t, s1)
}
