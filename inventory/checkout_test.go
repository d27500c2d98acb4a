package inventory_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// cartStrategies are the safe cart strategies: every cart test runs with both.
var cartStrategies = []string{inventory.StrategyGuard, inventory.StrategyLockGuard}

// cartService returns a Service selling carts with a real lock client on srv (NewLocker's
// Locker is also the MultiLocker), logging to log when it is not nil.
func cartService(t testing.TB, db *gorm.DB, srv *redistest.Server, log *slog.Logger) *inventory.Service {
	t.Helper()
	lc := lockClient(t, srv)
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Logger: log})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func lines(pairs ...int64) []inventory.CartLine {
	out := make([]inventory.CartLine, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, inventory.CartLine{ItemID: pairs[i], Quantity: int(pairs[i+1])})
	}
	return out
}

// assertBalanced checks, for every item, initial = stock + sold + held and that nothing
// oversold.
func assertBalanced(t testing.TB, s *inventory.Service) {
	t.Helper()
	all, err := s.Stats(context.Background())
	require.NoError(t, err)
	for _, st := range all {
		assert.GreaterOrEqual(t, st.Stock, 0, "item %d", st.ItemID)
		assert.Zero(t, st.OversoldUnits, "item %d", st.ItemID)
		assert.Equal(t, st.InitialStock, st.Stock+st.SoldUnits+st.HeldUnits, "item %d: initial = stock + sold + held", st.ItemID)
	}
}

// Lines of one item are merged before anything is checked: one order, one line per item,
// ascending by item; sold units count the lines.
func TestCheckoutMergesLines(t *testing.T) { forEachBackend(t, testCheckoutMergesLines) }

func testCheckoutMergesLines(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range cartStrategies {
		t.Run(name, func(t *testing.T) {
			db, _ := openDB(t, be)
			s := cartService(t, db, srv, nil)
			ids := resetItems(t, s, 10, 10)
			a, b := ids[0], ids[1]
			rec, err := s.Checkout(t.Context(), inventory.CheckoutRequest{Strategy: name,
				Lines: lines(b, 2, a, 1, b, 3, a, 2)})
			require.NoError(t, err)
			assert.Positive(t, rec.OrderID)
			assert.Equal(t, name, rec.Strategy)
			require.Len(t, rec.Lines, 2)
			assert.Equal(t, inventory.LineReceipt{ItemID: a, Quantity: 3, Remaining: 7, FenceToken: rec.Lines[0].FenceToken}, rec.Lines[0])
			assert.Equal(t, inventory.LineReceipt{ItemID: b, Quantity: 5, Remaining: 5, FenceToken: rec.Lines[1].FenceToken}, rec.Lines[1])
			if name == inventory.StrategyLockGuard {
				assert.Positive(t, rec.Lines[0].FenceToken)
				assert.Positive(t, rec.Lines[1].FenceToken)
			}
			assert.Equal(t, 3, statsOf(t, s, a).SoldUnits)
			assert.Equal(t, 5, statsOf(t, s, b).SoldUnits)
			assert.Equal(t, 1, statsOf(t, s, b).OrderCount)
			assertBalanced(t, s)

			// A single purchase writes its line too.
			_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 2, Strategy: name})
			require.NoError(t, err)
			assert.Equal(t, 5, statsOf(t, s, a).SoldUnits)
			assert.Equal(t, 2, statsOf(t, s, a).OrderCount)
			assertBalanced(t, s)
		})
	}
}

// A short line rolls the whole cart back, and the error names every short line with what was
// available.
func TestCheckoutAllOrNothing(t *testing.T) { forEachBackend(t, testCheckoutAllOrNothing) }

func testCheckoutAllOrNothing(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range append(cartStrategies, inventory.StrategyNaive) {
		t.Run(name, func(t *testing.T) {
			db, _ := openDB(t, be)
			s := cartService(t, db, srv, nil)
			ids := resetItems(t, s, 5, 1, 0)
			_, err := s.Checkout(t.Context(), inventory.CheckoutRequest{Strategy: name,
				Lines: lines(ids[0], 2, ids[1], 2, ids[2], 1)})
			require.ErrorIs(t, err, inventory.ErrInsufficientStock)
			var short *inventory.ShortLinesError
			require.ErrorAs(t, err, &short)
			assert.Equal(t, []inventory.ShortLine{
				{ItemID: ids[1], Requested: 2, Available: 1},
				{ItemID: ids[2], Requested: 1, Available: 0},
			}, short.Lines)
			for i, want := range []int{5, 1, 0} {
				st := statsOf(t, s, ids[i])
				assert.Equal(t, want, st.Stock, "item %d untouched", ids[i])
				assert.Zero(t, st.OrderCount)
			}
		})
	}
}

func TestCheckoutValidation(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	s := cartService(t, db, srv, nil)
	ids := resetItems(t, s, 5, 5)
	many := make([]inventory.CartLine, inventory.MaxCartLines+1)
	for i := range many {
		many[i] = inventory.CartLine{ItemID: ids[0], Quantity: 1}
	}
	for _, tc := range []struct {
		req  inventory.CheckoutRequest
		want error
		msg  string
	}{
		{inventory.CheckoutRequest{}, inventory.ErrInvalid, "at least one line"},
		{inventory.CheckoutRequest{Lines: many}, inventory.ErrInvalid, "at most 50 lines"},
		{inventory.CheckoutRequest{Lines: lines(ids[0], 0)}, inventory.ErrInvalid, "line 1 (item"},
		{inventory.CheckoutRequest{Lines: lines(0, 1)}, inventory.ErrInvalid, "item id must be positive"},
		{inventory.CheckoutRequest{Lines: lines(ids[0], 600, ids[0], 600)}, inventory.ErrInvalid, "add up to 1200"},
		{inventory.CheckoutRequest{Lines: lines(ids[0], 1), Strategy: inventory.StrategyLock}, inventory.ErrInvalid, "does not sell carts"},
		{inventory.CheckoutRequest{Lines: lines(ids[0], 1, 9998, 1, 9999, 2)}, inventory.ErrNotFound, "items 9998, 9999"},
	} {
		_, err := s.Checkout(t.Context(), tc.req)
		assert.ErrorIs(t, err, tc.want, tc.msg)
		assert.ErrorContains(t, err, tc.msg)
	}
	assert.Equal(t, 5, statsOf(t, s, ids[0]).Stock)
}

// Same key and same cart (after merging) replays the order; another cart under the key is a
// conflict; a purchase's key is not a cart's.
func TestCheckoutIdempotency(t *testing.T) { forEachBackend(t, testCheckoutIdempotency) }

func testCheckoutIdempotency(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	ids := resetItems(t, s, 10, 10)
	a, b := ids[0], ids[1]
	first, err := s.Checkout(t.Context(), inventory.CheckoutRequest{IdempotencyKey: "cart-1", Lines: lines(a, 1, b, 2)})
	require.NoError(t, err)
	assert.False(t, first.Replayed)
	again, err := s.Checkout(t.Context(), inventory.CheckoutRequest{IdempotencyKey: "cart-1", Lines: lines(b, 1, a, 1, b, 1)})
	require.NoError(t, err, "the same cart once merged")
	assert.True(t, again.Replayed)
	again.Replayed = false
	first.Spent, again.Spent = inventory.Spent{}, inventory.Spent{} // what each request cost
	assert.Equal(t, first, again, "the original answer")
	_, err = s.Checkout(t.Context(), inventory.CheckoutRequest{IdempotencyKey: "cart-1", Lines: lines(a, 2, b, 2)})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict)
	assert.ErrorContains(t, err, "a cart of")
	_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 1, IdempotencyKey: "cart-1"})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict)
	_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: a, Quantity: 1, IdempotencyKey: "p-1"})
	require.NoError(t, err)
	_, err = s.Checkout(t.Context(), inventory.CheckoutRequest{IdempotencyKey: "p-1", Lines: lines(a, 1)})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict)

	// Concurrent requests with one key: one order.
	var wg sync.WaitGroup
	var replays atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := s.Checkout(context.Background(), inventory.CheckoutRequest{IdempotencyKey: "cart-2", Lines: lines(a, 1, b, 1)})
			assert.NoError(t, err)
			if rec.Replayed {
				replays.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 7, replays.Load())
	assert.Equal(t, 10-1-1-1, statsOf(t, s, a).Stock)
	assertBalanced(t, s)
}

// countingHandler counts the log records whose message contains one of its words.
type countingHandler struct {
	words []string
	n     *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	for _, w := range h.words {
		if strings.Contains(r.Message, w) {
			h.n.Add(1)
		}
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// Carts {A,B} and {B,A} at once, many times, never deadlock: lock+guard takes the locks in
// one order (ObtainMany), and every cart's transaction updates its rows ascending by item id,
// so PostgreSQL never finds a deadlock to break (no busy retry either).
func TestCheckoutOppositeOrdersNeverDeadlock(t *testing.T) {
	forEachBackend(t, testCheckoutOppositeOrdersNeverDeadlock)
}

func testCheckoutOppositeOrdersNeverDeadlock(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range cartStrategies {
		t.Run(name, func(t *testing.T) {
			var retries atomic.Int64
			db, path := openDB(t, be)
			log := slog.New(countingHandler{words: []string{"busy", "lost lock"}, n: &retries})
			s1 := cartService(t, db, srv, log)
			s2 := cartService(t, openPath(t, path), srv, log) // another process
			ids := resetItems(t, s1, 10000, 10000)
			a, b := ids[0], ids[1]
			const rounds = 150
			var wg sync.WaitGroup
			var sold atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for w, cart := range [][]inventory.CartLine{lines(a, 1, b, 1), lines(b, 1, a, 1), lines(a, 1, b, 1), lines(b, 1, a, 1)} {
				s := []*inventory.Service{s1, s2}[w%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						_, err := s.Checkout(ctx, inventory.CheckoutRequest{Strategy: name, Lines: cart})
						if !assert.NoError(t, err) {
							return
						}
						sold.Add(1)
					}
				}()
			}
			wg.Wait()
			assert.EqualValues(t, 4*rounds, sold.Load())
			assert.Zero(t, retries.Load(), "no deadlock, busy or lost lock retried")
			assert.Equal(t, 10000-4*rounds, statsOf(t, s1, a).Stock)
			assertBalanced(t, s1)
		})
	}
}

// Carts and single purchases of one item, at once, from two processes, never oversell: they
// exclude each other through the item's lock (lock+guard) or meet at the guarded update.
func TestCheckoutAndPurchasesNeverOversell(t *testing.T) {
	forEachBackend(t, testCheckoutAndPurchasesNeverOversell)
}

func testCheckoutAndPurchasesNeverOversell(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range cartStrategies {
		t.Run(name, func(t *testing.T) {
			db, path := openDB(t, be)
			s1 := cartService(t, db, srv, nil)
			s2 := cartService(t, openPath(t, path), srv, nil)
			ids := resetItems(t, s1, 40, 1000)
			hot, other := ids[0], ids[1]
			var wg sync.WaitGroup
			var cartUnits, buyUnits atomic.Int64
			start := make(chan struct{})
			for i := range 60 {
				s := []*inventory.Service{s1, s2}[i%2]
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-start
					_, err := s.Checkout(context.Background(), inventory.CheckoutRequest{Strategy: name, Lines: lines(other, 1, hot, 1)})
					if err == nil {
						cartUnits.Add(1)
					} else {
						assert.ErrorIs(t, err, inventory.ErrInsufficientStock)
					}
				}()
				go func() {
					defer wg.Done()
					<-start
					_, err := s.Purchase(context.Background(), inventory.PurchaseRequest{Strategy: name, ItemID: hot, Quantity: 1, Work: time.Millisecond})
					if err == nil {
						buyUnits.Add(1)
					} else {
						assert.True(t, errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrInsufficientStock), "%v", err)
					}
				}()
			}
			close(start)
			wg.Wait()
			st := statsOf(t, s1, hot)
			assert.Equal(t, 40, int(cartUnits.Load()+buyUnits.Load()), "every unit sold once")
			assert.Zero(t, st.Stock)
			assert.Equal(t, int(cartUnits.Load()), 1000-statsOf(t, s1, other).Stock, "a cart's lines go together")
			assertBalanced(t, s1)
			if name == inventory.StrategyLockGuard {
				assertFenceOrder(t, ordersOf(t, s1, hot))
			}
		})
	}
}

// obliviousMulti hands out multi-key holds whose holder cannot notice their loss (a process
// paused past the lease).
type obliviousMulti struct{ inventory.MultiLocker }

func (o obliviousMulti) ObtainMany(ctx context.Context, keys []inventory.KeyFloor) (inventory.MultiHeld, error) {
	h, err := o.MultiLocker.ObtainMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	return obliviousMultiHeld{h}, nil
}

type obliviousMultiHeld struct{ inventory.MultiHeld }

func (obliviousMultiHeld) Context(parent context.Context) context.Context { return parent }

// A cart whose holder pauses past its locks' lease while another process buys one of its
// items writes nothing: the newer token on that item refuses the cart's fenced update, and
// the whole transaction rolls back (the item nobody else touched included). Its one retry
// meets the same fate, and the cart answers ErrLockLost.
func TestCheckoutPausedHolderWritesNothing(t *testing.T) {
	forEachBackend(t, testCheckoutPausedHolderWritesNothing)
}

func testCheckoutPausedHolderWritesNothing(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	short := locking.New(warmClient(t, srv), &locking.Options{KeyPrefix: lockPrefix, Lease: 300 * time.Millisecond, DisableWatchdog: true})
	t.Cleanup(func() { _ = short.Close() })
	l := inventory.NewLocker(short)
	paused, resume := make(chan struct{}), make(chan struct{})
	sleep := func(ctx context.Context, d time.Duration) error {
		paused <- struct{}{}
		<-resume
		return nil
	}
	cartSvc := newService(t, inventory.Config{DB: db, Locker: l, Multi: obliviousMulti{l.(inventory.MultiLocker)}, Sleep: sleep})
	other := cartService(t, openPath(t, path), srv, nil)
	ids := resetItems(t, other, 10, 10)
	a, b := ids[0], ids[1]

	done := make(chan error, 1)
	go func() {
		_, err := cartSvc.Checkout(context.Background(), inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard, Lines: lines(a, 2, b, 2)})
		done <- err
	}()
	var tokens []int64
	for range 2 { // the attempt and its retry
		select {
		case <-paused:
		case err := <-done: // a cart that ends before its work must not leave the test waiting
			t.Fatalf("the cart ended before its work: %v", err)
		}
		// The cart's locks expire while it sleeps; the other process takes item b's lock.
		rec, err := other.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: b, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		require.NoError(t, err)
		tokens = append(tokens, rec.FenceToken)
		resume <- struct{}{}
	}
	err := <-done
	require.ErrorIs(t, err, inventory.ErrLockLost)
	assert.Equal(t, 10, statsOf(t, other, a).Stock, "item a, which nobody else touched, is rolled back too")
	assert.Zero(t, statsOf(t, other, a).OrderCount)
	assert.Equal(t, 8, statsOf(t, other, b).Stock, "only the two single purchases")
	assert.Less(t, tokens[0], tokens[1])
	assertBalanced(t, other)
}

// A hot item's coalescing worker holds the item's lock one batch at a time and releases it:
// a cart waiting for that lock (the same Client, whose waiters are served in order) gets it
// within a bounded time while buyers keep the item busy.
func TestCheckoutNotStarvedByHotItem(t *testing.T) {
	forEachBackend(t, testCheckoutNotStarvedByHotItem)
}

func testCheckoutNotStarvedByHotItem(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	// Batches of 4 for 32 buyers: the buyers' queue is never empty, the worker takes the lock
	// again at once after each release.
	lc := lockClient(t, srv)
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), MaxBatch: 4})
	t.Cleanup(func() { _ = s.Close() })
	ids := resetItems(t, s, 1_000_000, 100)
	t.Run("same process", func(t *testing.T) { notStarved(t, s, s, ids) })
	// Another process: its waiters are not queued with this one's. The buyers' worker releases
	// the lock between batches, and a release wakes the waiters of every process.
	t.Run("another process", func(t *testing.T) { notStarved(t, s, cartService(t, openPath(t, path), srv, nil), ids) })
}

// notStarved keeps buyers of ids[0] busy on s while carts of ids[0] and ids[1] check out on
// carts: each cart must be served within a bounded time.
func notStarved(t *testing.T, s, carts *inventory.Service, ids []int64) {
	hot, other := ids[0], ids[1]
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bought atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: hot, Quantity: 1, Work: 5 * time.Millisecond}); err == nil {
					bought.Add(1)
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	require.Eventually(t, func() bool { return bought.Load() > 50 }, 20*time.Second, 10*time.Millisecond, "the hot item sells")
	for i := range 5 {
		start := time.Now()
		before := bought.Load()
		rec, err := carts.Checkout(t.Context(), inventory.CheckoutRequest{Lines: lines(hot, 1, other, 1)})
		took := time.Since(start)
		require.NoError(t, err, "cart %d", i)
		assert.Len(t, rec.Lines, 2)
		// A starved cart waits long while many purchases of the hot item go by (until its lock
		// wait runs out: an error above). Either alone is not starvation: on a loaded machine
		// a cart waited 2.05s while 36 purchases sold (the buyers slow down with it), and
		// beside a streaming hold 299 purchases sold in the 0.23s a cart waited.
		passed := bought.Load() - before
		t.Logf("cart %d: %s, while %d purchases of the hot item were sold", i, took, passed)
		assert.False(t, took >= 2*time.Second && passed >= 200, "cart %d waited %s while %d purchases of the hot item were sold", i, took, passed)
	}
	stop()
	wg.Wait()
	assertBalanced(t, s)
	assertFenceOrder(t, ordersOf(t, s, hot))
}

// With Redis down, a lock+guard cart follows --on-redis-down: fail answers ErrUnavailable
// with nothing written; guard sells through the guarded updates alone, the order marked
// degraded and its lines without a token.
func TestCheckoutRedisDown(t *testing.T) { forEachBackend(t, testCheckoutRedisDown) }

func testCheckoutRedisDown(t *testing.T, be backend) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	fail := degradedService(t, db, srv, inventory.OnRedisDownFail, nil)
	guard := degradedService(t, db, srv, inventory.OnRedisDownGuard, nil)
	ids := resetItems(t, fail, 5, 5)
	srv.Stop()
	_, err := fail.Checkout(t.Context(), inventory.CheckoutRequest{Lines: lines(ids[0], 1, ids[1], 1)})
	require.ErrorIs(t, err, inventory.ErrUnavailable)
	assert.Equal(t, 5, statsOf(t, fail, ids[0]).Stock)
	rec, err := guard.Checkout(t.Context(), inventory.CheckoutRequest{IdempotencyKey: "down-1", Lines: lines(ids[0], 1, ids[1], 2)})
	require.NoError(t, err)
	assert.True(t, rec.Degraded)
	for _, l := range rec.Lines {
		assert.Zero(t, l.FenceToken)
	}
	again, err := guard.Checkout(t.Context(), inventory.CheckoutRequest{IdempotencyKey: "down-1", Lines: lines(ids[0], 1, ids[1], 2)})
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	assert.True(t, again.Degraded, "the replay says degraded too")
	assert.Equal(t, 3, statsOf(t, guard, ids[1]).Stock)
	assertBalanced(t, guard)
}
