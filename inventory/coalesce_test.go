package inventory_test

import (
	"context"
	"errors"
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

// gatedLocker holds every Obtain until open is closed, so that a test can queue a whole batch
// behind the item's worker before its hold begins.
type gatedLocker struct {
	inventory.Locker
	open chan struct{}
}

func (g gatedLocker) Obtain(ctx context.Context, key string, floor int64) (inventory.Held, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Locker.Obtain(ctx, key, floor)
}

// holdRecorder is a HoldObserver that keeps every hold's size.
type holdRecorder struct {
	mu    sync.Mutex
	sizes []int
}

func (h *holdRecorder) Hold(_ string, _ int64, orders int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sizes = append(h.sizes, orders)
}

func (h *holdRecorder) get() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

type batchResult struct {
	rec inventory.Receipt
	err error
}

// batchOf queues reqs (in this order) behind a gated lock+guard worker, then opens the gate:
// they are served by one hold. It returns each request's outcome.
func batchOf(t *testing.T, s *inventory.Service, gate chan struct{}, ctxs []context.Context, reqs []inventory.PurchaseRequest) []batchResult {
	t.Helper()
	out := make([]batchResult, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		req.Strategy = inventory.StrategyLockGuard
		ctx := t.Context()
		if ctxs != nil && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].rec, out[i].err = s.Purchase(ctx, req)
		}()
		require.Eventually(t, func() bool { return inventory.Queued(s, inventory.StrategyLockGuard, req.ItemID) == i+1 },
			10*time.Second, time.Millisecond, "request %d queued in order", i)
	}
	close(gate)
	wg.Wait()
	return out
}

type coalesceEnv struct {
	s     *inventory.Service
	gate  chan struct{}
	holds *holdRecorder
	id    int64
	path  string // the database file, for another process
}

func newCoalesceEnv(t *testing.T, be backend, srv *redistest.Server, stock int, sleep func(context.Context, time.Duration) error) coalesceEnv {
	t.Helper()
	db, path := openDB(t, be)
	rdb := warmClient(t, srv)
	lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	env := coalesceEnv{gate: make(chan struct{}), holds: &holdRecorder{}, path: path}
	env.s = newService(t, inventory.Config{DB: db, Locker: gatedLocker{inventory.NewLocker(lc), env.gate},
		Holds: env.holds, Sleep: sleep})
	t.Cleanup(func() { _ = env.s.Close() })
	env.id = resetItems(t, env.s, stock)[0]
	return env
}

// One hold sells to every waiting buyer that fits, in arrival order, in one transaction; the
// others are answered sold out / insufficient stock on a stock read after that write, with no
// work spent.
func TestCoalescedHoldSellsToTheQueue(t *testing.T) {
	forEachBackend(t, testCoalescedHoldSellsToTheQueue)
}

func testCoalescedHoldSellsToTheQueue(t *testing.T, be backend) {
	srv := redistest.Start(t)
	var worked atomic.Int64
	env := newCoalesceEnv(t, be, srv, 5, func(ctx context.Context, d time.Duration) error {
		worked.Add(1)
		return nil
	})
	qty := []int{2, 1, 3, 2, 1, 1, 1}
	reqs := make([]inventory.PurchaseRequest, len(qty))
	for i, q := range qty {
		reqs[i] = inventory.PurchaseRequest{ItemID: env.id, Quantity: q, Work: 10 * time.Millisecond}
	}
	res := batchOf(t, env.s, env.gate, nil, reqs)

	// Stock 5: 2 and 1 fit (2 left), 3 does not fit beside them, 2 fits (0 left), the rest do
	// not fit beside the batch either. Those are not refused on units the batch has not
	// written yet: the next hold reads the stock after the write (0) and answers them sold out.
	for i, want := range []error{nil, nil, inventory.ErrSoldOut, nil, inventory.ErrSoldOut, inventory.ErrSoldOut, inventory.ErrSoldOut} {
		if want == nil {
			require.NoError(t, res[i].err, "request %d", i)
			assert.Positive(t, res[i].rec.Spent.Work, "request %d: its work was spent", i)
			continue
		}
		assert.ErrorIs(t, res[i].err, want, "request %d", i)
		assert.Zero(t, inventory.SpentOf(res[i].err).Work, "request %d: refused with no work spent", i)
	}
	assert.EqualValues(t, 3, worked.Load(), "only the admitted purchases worked")
	assert.Equal(t, res[0].rec.FenceToken, res[3].rec.FenceToken, "one hold, one token")
	assert.Equal(t, []int{3, 2, 0}, []int{res[0].rec.Remaining, res[1].rec.Remaining, res[3].rec.Remaining},
		"each receipt tells the stock its own order left")
	assert.Equal(t, []int{3}, env.holds.get(), "one hold wrote three orders")

	orders := ordersOf(t, env.s, env.id)
	require.Len(t, orders, 3)
	assertOneWritePerToken(t, orders)
	assert.Equal(t, orders[0].BatchID, orders[2].BatchID, "one transaction")
	st := statsOf(t, env.s, env.id)
	assert.Equal(t, 0, st.Stock)
	assert.Equal(t, 5, st.SoldUnits)
}

// A buyer whose context ends before the write is left out and answered; a failed work
// affects only its buyer; the others of the batch are sold in the one write.
func TestCoalescedBuyerLeavesOrFailsAlone(t *testing.T) {
	be := sqliteBackend // the write path is tested on both backends above
	srv := redistest.Start(t)
	const failing, slow, leaves = 11 * time.Millisecond, 300 * time.Millisecond, 301 * time.Millisecond
	errPayment := errors.New("payment declined")
	leaving, cancel := context.WithCancel(t.Context())
	env := newCoalesceEnv(t, be, srv, 10, func(ctx context.Context, d time.Duration) error {
		switch d {
		case failing:
			return errPayment
		case leaves: // its buyer leaves once its work has started
			cancel()
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	reqs := []inventory.PurchaseRequest{
		{ItemID: env.id, Quantity: 1, Work: slow},
		{ItemID: env.id, Quantity: 1, Work: leaves},  // its buyer leaves during the work
		{ItemID: env.id, Quantity: 1, Work: failing}, // its work fails
		{ItemID: env.id, Quantity: 1},
	}
	res := batchOf(t, env.s, env.gate, []context.Context{nil, leaving, nil, nil}, reqs)
	require.NoError(t, res[0].err)
	assert.ErrorIs(t, res[1].err, context.Canceled)
	assert.ErrorIs(t, res[2].err, errPayment)
	require.NoError(t, res[3].err)
	assert.Equal(t, res[0].rec.FenceToken, res[3].rec.FenceToken)
	st := statsOf(t, env.s, env.id)
	assert.Equal(t, 2, st.SoldUnits, "nothing written for the buyer who left or failed")
	assert.Equal(t, 2, st.OrderCount)
	assert.Equal(t, []int{2}, env.holds.get())
}

// A key taken by another process between the lookup and the hold's write: the insert is
// left out (ON CONFLICT DO NOTHING), its buyer gets the replay, the batch's others are sold.
func TestCoalescedKeyTakenElsewhereReplays(t *testing.T) {
	forEachBackend(t, testCoalescedKeyTakenElsewhereReplays)
}

func testCoalescedKeyTakenElsewhereReplays(t *testing.T, be backend) {
	srv := redistest.Start(t)
	const marker = 7 * time.Millisecond
	var other *inventory.Service
	var otherRec inventory.Receipt
	env := newCoalesceEnv(t, be, srv, 10, func(ctx context.Context, d time.Duration) error {
		if d == marker {
			var err error
			otherRec, err = other.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: 1, Quantity: 2,
				Strategy: inventory.StrategyGuard, IdempotencyKey: "k-taken"})
			return err
		}
		return nil
	})
	require.EqualValues(t, 1, env.id)
	other = newService(t, inventory.Config{DB: openPath(t, env.path)})
	res := batchOf(t, env.s, env.gate, nil, []inventory.PurchaseRequest{
		{ItemID: env.id, Quantity: 1, IdempotencyKey: "k-fresh"},
		{ItemID: env.id, Quantity: 2, IdempotencyKey: "k-taken", Work: marker},
		{ItemID: env.id, Quantity: 3},
	})
	for i := range res {
		require.NoError(t, res[i].err, i)
	}
	assert.True(t, res[1].rec.Replayed, "answered with the other process's order")
	assert.Equal(t, otherRec.OrderID, res[1].rec.OrderID)
	assert.False(t, res[0].rec.Replayed)
	st := statsOf(t, env.s, env.id)
	assert.Equal(t, 6, st.SoldUnits, "1 + 3 in the hold, 2 by the other process: the key sold once")
	assert.Equal(t, 3, st.OrderCount)
	assert.Equal(t, 4, st.Stock)
	assert.Equal(t, 4, res[2].rec.Remaining, "remaining follows the other writer's sale")
}

// Another writer (guard, without the lock) takes stock during the hold's work: the hold's
// update finds less than it read, reads again and admits again under the same hold.
func TestCoalescedStockMovedReadmits(t *testing.T) {
	forEachBackend(t, testCoalescedStockMovedReadmits)
}

func testCoalescedStockMovedReadmits(t *testing.T, be backend) {
	srv := redistest.Start(t)
	const marker = 7 * time.Millisecond
	var s *inventory.Service
	env := newCoalesceEnv(t, be, srv, 4, func(ctx context.Context, d time.Duration) error {
		if d == marker {
			_, err := s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: 1, Quantity: 2, Strategy: inventory.StrategyGuard})
			return err
		}
		return nil
	})
	s = env.s
	res := batchOf(t, env.s, env.gate, nil, []inventory.PurchaseRequest{
		{ItemID: env.id, Quantity: 1, Work: marker},
		{ItemID: env.id, Quantity: 1},
		{ItemID: env.id, Quantity: 1},
	})
	require.NoError(t, res[0].err)
	require.NoError(t, res[1].err)
	assert.ErrorIs(t, res[2].err, inventory.ErrSoldOut, "re-admitted in order: the last no longer fits")
	assert.Equal(t, res[0].rec.FenceToken, res[1].rec.FenceToken, "same hold")
	st := statsOf(t, env.s, env.id)
	assert.Zero(t, st.OversoldUnits)
	assert.Equal(t, 0, st.Stock)
	assert.Equal(t, 4, st.SoldUnits)
	assertOneWritePerToken(t, ordersOf(t, env.s, env.id))
}

// MaxBatch 1 is one purchase per hold: every order has a token of its own.
func TestMaxBatchOneIsOnePurchasePerHold(t *testing.T) {
	forEachBackend(t, testMaxBatchOneIsOnePurchasePerHold)
}

func testMaxBatchOneIsOnePurchasePerHold(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	rdb := warmClient(t, srv)
	lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), MaxBatch: 1})
	id := resetItems(t, s, burstStock)[0]
	o := burst(t, []*inventory.Service{s}, inventory.StrategyLockGuard, id, burstSize, 2*time.Millisecond)
	assertSafe(t, s, id, o)
	seen := map[int64]bool{}
	for _, ord := range ordersOf(t, s, id) {
		assert.False(t, seen[ord.FenceToken], "token %d used twice", ord.FenceToken)
		seen[ord.FenceToken] = true
	}
	_, err := inventory.NewService(inventory.Config{DB: db, MaxBatch: -1})
	assert.Error(t, err)
}

// Bursts with work across two processes: batches form (fewer holds than orders), nothing is
// oversold, each token is written once and in order.
func TestCoalescedBurstAcrossProcesses(t *testing.T) {
	forEachBackend(t, testCoalescedBurstAcrossProcesses)
}

func testCoalescedBurstAcrossProcesses(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	a, _ := lockService(t, db, srv, locking.Options{}, nil)
	b, _ := lockService(t, openPath(t, path), srv, locking.Options{}, nil)
	id := resetItems(t, a, 40)[0]
	o := burst(t, []*inventory.Service{a, b}, inventory.StrategyLockGuard, id, 120, 20*time.Millisecond)
	assertSafe(t, a, id, o)
	orders := ordersOf(t, a, id)
	assertFenceOrder(t, orders)
	tokens := map[int64]bool{}
	for _, ord := range orders {
		tokens[ord.FenceToken] = true
	}
	assert.Less(t, len(tokens), len(orders), "some hold sold to several buyers")
	assert.Equal(t, 0, statsOf(t, a, id).Stock, "sold out")
}

// Close stops the workers; a purchase after Close is unavailable, not hung.
func TestCloseStopsWorkers(t *testing.T) {
	be := sqliteBackend
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s, _ := lockService(t, db, srv, locking.Options{}, nil)
	id := resetItems(t, s, 10)[0]
	_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyGuard})
	assert.NoError(t, err, "the other strategies still work")
}

// lostAtOnceLocker obtains real locks whose context is already ended, as if each was lost
// between Obtain and the hold's first read.
type lostAtOnceLocker struct {
	inventory.Locker
	obtains *atomic.Int64
}

type lostHeld struct{ inventory.Held }

func (lostHeld) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	cancel(errors.New("lock lost"))
	return ctx
}

func (l lostAtOnceLocker) Obtain(ctx context.Context, key string, floor int64) (inventory.Held, error) {
	l.obtains.Add(1)
	h, err := l.Locker.Obtain(ctx, key, floor)
	if err != nil {
		return nil, err
	}
	return lostHeld{h}, nil
}

// A lock lost before the hold's first read is answered lock_lost after the one retry, as on
// the one-purchase path: not taken again and again while the buyer waits.
func TestCoalescedLockLostBeforeTheReadIsRetriedOnce(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	lc := lockClient(t, srv)
	var obtains atomic.Int64
	s := newService(t, inventory.Config{DB: db, Locker: lostAtOnceLocker{inventory.NewLocker(lc), &obtains}})
	id := resetItems(t, s, 5)[0]

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	require.ErrorIs(t, err, inventory.ErrLockLost)
	assert.EqualValues(t, 2, obtains.Load(), "one hold, then the one retry")
	st := statsOf(t, s, id)
	assert.Equal(t, 5, st.Stock)
	assert.Zero(t, st.OrderCount)
}
