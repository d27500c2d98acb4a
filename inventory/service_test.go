package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/models"
)

func TestPurchaseReceiptAndErrors(t *testing.T) { forEachBackend(t, testPurchaseReceiptAndErrors) }

func testPurchaseReceiptAndErrors(t *testing.T, be backend) {
	ctx := t.Context()
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	ids := resetItems(t, s, 5, 0)
	id, empty := ids[0], ids[1]

	rec, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 2})
	require.NoError(t, err)
	assert.Equal(t, inventory.Receipt{OrderID: rec.OrderID, ItemID: id, Quantity: 2, Remaining: 3,
		Strategy: inventory.StrategyGuard}, rec)
	assert.Positive(t, rec.OrderID)

	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 4})
	assert.ErrorIs(t, err, inventory.ErrInsufficientStock)
	assert.ErrorContains(t, err, "has 3 left, 4 asked")
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: empty, Quantity: 1})
	assert.ErrorIs(t, err, inventory.ErrSoldOut)
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: 999, Quantity: 1})
	assert.ErrorIs(t, err, inventory.ErrNotFound)

	for _, name := range []string{inventory.StrategyNaive, inventory.StrategyLocal} {
		_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 4, Strategy: name})
		assert.ErrorIs(t, err, inventory.ErrInsufficientStock, name)
		_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: empty, Quantity: 1, Strategy: name})
		assert.ErrorIs(t, err, inventory.ErrSoldOut, name)
		_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: 999, Quantity: 1, Strategy: name})
		assert.ErrorIs(t, err, inventory.ErrNotFound, name)
		rec, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name})
		require.NoError(t, err, name)
		assert.Equal(t, name, rec.Strategy)
	}
	assert.Equal(t, 1, statsOf(t, s, id).Stock)

	orders, err := s.ListOrders(ctx, inventory.OrderQuery{ItemID: id})
	require.NoError(t, err)
	require.Len(t, orders, 3, "failed purchases record nothing")
}

func TestPurchaseValidation(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	s := newService(t, inventory.Config{DB: db})
	id := resetItems(t, s, 5)[0]
	for name, req := range map[string]inventory.PurchaseRequest{
		"zero quantity":     {ItemID: id, Quantity: 0},
		"negative quantity": {ItemID: id, Quantity: -1},
		"too many":          {ItemID: id, Quantity: inventory.MaxQuantity + 1},
		"zero item":         {ItemID: 0, Quantity: 1},
		"negative work":     {ItemID: id, Quantity: 1, Work: -time.Millisecond},
		"too much work":     {ItemID: id, Quantity: 1, Work: inventory.MaxWork + time.Nanosecond},
		"unknown strategy":  {ItemID: id, Quantity: 1, Strategy: "optimistic"},
		"redlock not set":   {ItemID: id, Quantity: 1, Strategy: inventory.StrategyRedlockGuard},
		"long key":          {ItemID: id, Quantity: 1, IdempotencyKey: strings.Repeat("k", 129)},
		"unprintable key":   {ItemID: id, Quantity: 1, IdempotencyKey: "a\nb"},
	} {
		_, err := s.Purchase(t.Context(), req)
		assert.ErrorIs(t, err, inventory.ErrInvalid, name)
	}
	assert.Equal(t, 5, statsOf(t, s, id).Stock)
}

func TestNewServiceAndStrategies(t *testing.T) {
	_, err := inventory.NewService(inventory.Config{})
	assert.Error(t, err, "DB is required")
	db, _ := openDB(t, sqliteBackend)
	_, err = inventory.NewService(inventory.Config{DB: db, Default: "nope"})
	assert.Error(t, err)
	_, err = inventory.NewService(inventory.Config{DB: db, Default: inventory.StrategyRedlockGuard})
	assert.Error(t, err, "redlock+guard needs a Redlock locker")

	s := newService(t, inventory.Config{DB: db})
	assert.Equal(t, []string{"naive", "local", "lock", "guard", "lock+guard"}, s.Strategies())
	assert.Equal(t, inventory.StrategyLockGuard, s.DefaultStrategy())
	for _, name := range append(s.Strategies(), inventory.StrategyRedlockGuard) {
		assert.True(t, inventory.ValidStrategy(name), name)
	}
	assert.False(t, inventory.ValidStrategy(""))
	assert.False(t, inventory.ValidStrategy("Guard"))
}

func TestIdempotentReplayAndConflict(t *testing.T) {
	forEachBackend(t, testIdempotentReplayAndConflict)
}

func testIdempotentReplayAndConflict(t *testing.T, be backend) {
	ctx := t.Context()
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	ids := resetItems(t, s, 10, 10)
	id, other := ids[0], ids[1]

	first, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 2, IdempotencyKey: "k-1"})
	require.NoError(t, err)
	assert.False(t, first.Replayed)
	// Another purchase in between: the replay still answers the original remaining stock.
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	require.NoError(t, err)

	again, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 2, IdempotencyKey: "k-1",
		Strategy: inventory.StrategyNaive})
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	first.Replayed = true
	assert.Equal(t, first, again, "the original receipt, strategy included")

	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 3, IdempotencyKey: "k-1"})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict)
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: other, Quantity: 2, IdempotencyKey: "k-1"})
	assert.ErrorIs(t, err, inventory.ErrIdempotencyConflict, "another item is another fingerprint")

	st := statsOf(t, s, id)
	assert.Equal(t, 3, st.SoldUnits)
	assert.Equal(t, 2, st.OrderCount)
}

func TestFailedPurchaseWithKeyIsNotRecorded(t *testing.T) {
	forEachBackend(t, testFailedPurchaseWithKeyIsNotRecorded)
}

func testFailedPurchaseWithKeyIsNotRecorded(t *testing.T, be backend) {
	ctx := t.Context()
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	id := resetItems(t, s, 1)[0]

	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 2, IdempotencyKey: "k"})
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	// The key holds nothing: a request with the same key may now succeed.
	rec, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, IdempotencyKey: "k"})
	require.NoError(t, err)
	assert.False(t, rec.Replayed)
}

// Two (here: twenty) concurrent requests with one key produce one order; the others wait for
// it and replay it. Both in one process and across two processes.
//
// With stock == quantity, the losers across processes fail on the stock the winner took; they
// still answer the winner's receipt.
func TestConcurrentSameKeyOneOrder(t *testing.T) { forEachBackend(t, testConcurrentSameKeyOneOrder) }

func testConcurrentSameKeyOneOrder(t *testing.T, be backend) {
	for _, tc := range []struct{ processes, stock int }{{1, 100}, {2, 100}, {1, 3}, {2, 3}} {
		processes, stock := tc.processes, tc.stock
		t.Run(fmt.Sprintf("processes=%d/stock=%d", processes, stock), func(t *testing.T) {
			db, path := openDB(t, be)
			services := []*inventory.Service{newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})}
			if processes == 2 {
				services = append(services, newService(t, inventory.Config{DB: openPath(t, path), Default: inventory.StrategyGuard}))
			}
			id := resetItems(t, services[0], stock)[0]

			const n = 20
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				receipts []inventory.Receipt
				start    = make(chan struct{})
			)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					<-start
					rec, err := services[i%len(services)].Purchase(context.Background(), inventory.PurchaseRequest{
						ItemID: id, Quantity: 3, IdempotencyKey: "same", Work: 20 * time.Millisecond,
					})
					assert.NoError(t, err)
					mu.Lock()
					receipts = append(receipts, rec)
					mu.Unlock()
				}(i)
			}
			close(start)
			wg.Wait()

			require.Len(t, receipts, n)
			fresh := 0
			for _, r := range receipts {
				assert.Equal(t, receipts[0].OrderID, r.OrderID)
				assert.Equal(t, stock-3, r.Remaining)
				if !r.Replayed {
					fresh++
				}
			}
			assert.Equal(t, 1, fresh, "exactly one request made the order")
			st := statsOf(t, services[0], id)
			assert.Equal(t, 1, st.OrderCount)
			assert.Equal(t, stock-3, st.Stock, "the losers' stock updates were rolled back")
		})
	}
}

func TestReadMethods(t *testing.T) { forEachBackend(t, testReadMethods) }

func testReadMethods(t *testing.T, be backend) {
	ctx := t.Context()
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	ids := resetItems(t, s, 10, 20)

	item, err := s.GetItem(ctx, ids[1])
	require.NoError(t, err)
	assert.Equal(t, "SKU-1", item.SKU)
	assert.Equal(t, 20, item.Stock)
	assert.Equal(t, 20, item.InitialStock)
	_, err = s.GetItem(ctx, 12345)
	assert.ErrorIs(t, err, inventory.ErrNotFound)

	for i := 0; i < 5; i++ {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: ids[i%2], Quantity: 1})
		require.NoError(t, err)
	}
	all, err := s.ListOrders(ctx, inventory.OrderQuery{})
	require.NoError(t, err)
	require.Len(t, all, 5)
	for i := 1; i < len(all); i++ {
		assert.Greater(t, all[i].ID, all[i-1].ID, "ascending by id")
	}
	page, err := s.ListOrders(ctx, inventory.OrderQuery{AfterID: all[1].ID, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, all[2].ID, page[0].ID)
	one, err := s.ListOrders(ctx, inventory.OrderQuery{ItemID: ids[1]})
	require.NoError(t, err)
	assert.Len(t, one, 2)
	for _, q := range []inventory.OrderQuery{{Limit: 1001}, {Limit: -1}, {AfterID: -1}, {ItemID: -2}} {
		_, err := s.ListOrders(ctx, q)
		assert.ErrorIs(t, err, inventory.ErrInvalid, "%+v", q)
	}

	stats, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, []inventory.ItemStats{
		{ItemID: ids[0], SKU: "SKU-0", InitialStock: 10, Stock: 7, SoldUnits: 3, OrderCount: 3},
		{ItemID: ids[1], SKU: "SKU-1", InitialStock: 20, Stock: 18, SoldUnits: 2, OrderCount: 2},
	}, stats)

	require.NoError(t, s.Ready(ctx))
}

func TestReset(t *testing.T) { forEachBackend(t, testReset) }

func testReset(t *testing.T, be backend) {
	ctx := t.Context()
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	old := resetItems(t, s, 3)[0]
	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: old, Quantity: 1})
	require.NoError(t, err)

	for name, items := range map[string][]inventory.NewItem{
		"empty sku":      {{SKU: " ", Name: "a", Stock: 1}},
		"empty name":     {{SKU: "a", Name: "", Stock: 1}},
		"negative stock": {{SKU: "a", Name: "a", Stock: -1}},
		"negative price": {{SKU: "a", Name: "a", Stock: 1, PriceCents: -1}},
		"duplicate sku":  {{SKU: "a", Name: "a", Stock: 1}, {SKU: "a", Name: "b", Stock: 2}},
	} {
		assert.ErrorIs(t, s.Reset(ctx, items), inventory.ErrInvalid, name)
	}
	assert.Equal(t, 2, statsOf(t, s, old).Stock, "a rejected reset changes nothing")

	require.NoError(t, s.Reset(ctx, []inventory.NewItem{{SKU: "n1", Name: "new", Stock: 7, PriceCents: 5}}))
	items, err := s.ListItems(ctx)
	require.NoError(t, err)
	require.Len(t, items, 1)
	assert.Equal(t, 7, items[0].InitialStock)
	assert.NotEqual(t, old, items[0].ID, "ids are not reused")
	orders, err := s.ListOrders(ctx, inventory.OrderQuery{})
	require.NoError(t, err)
	assert.Empty(t, orders)

	require.NoError(t, s.Reset(ctx, nil))
	items, err = s.ListItems(ctx)
	require.NoError(t, err)
	assert.Empty(t, items)
	assert.NotNil(t, items, "an empty list, not nil (renders as [])")
}

type countingAdmission struct {
	inFlight, peak, calls atomic.Int64
	limit                 int64
}

func (a *countingAdmission) Acquire(_ context.Context, itemID int64) (func(), error) {
	a.calls.Add(1)
	if n := a.inFlight.Add(1); n > a.limit {
		a.inFlight.Add(-1)
		return nil, fmt.Errorf("%w: item %d", inventory.ErrOverloaded, itemID)
	}
	return func() { a.inFlight.Add(-1) }, nil
}

func TestAdmission(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	adm := &countingAdmission{limit: 2}
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard, Admission: adm})
	id := resetItems(t, s, 100)[0]

	o := burst(t, []*inventory.Service{s}, inventory.StrategyGuard, id, 10, 50*time.Millisecond)
	assert.Positive(t, o.errs[inventory.ErrOverloaded.Error()], "some were shed")
	assert.Positive(t, o.ok)
	assert.EqualValues(t, 10, adm.calls.Load())
	assert.Zero(t, adm.inFlight.Load(), "every admitted purchase released")
	assertSafe(t, s, id, o)

	_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 0})
	assert.ErrorIs(t, err, inventory.ErrInvalid, "validation first")
	assert.EqualValues(t, 10, adm.calls.Load())
}

// A replay of a finished purchase is answered from its order, even while the item is at its
// admission limit: the limit guards work, and a replay does none.
func TestReplayIsNotShedByAdmission(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	adm := &countingAdmission{limit: 1}
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard, Admission: adm})
	id := resetItems(t, s, 100)[0]
	req := inventory.PurchaseRequest{ItemID: id, Quantity: 2, IdempotencyKey: "replay-under-load"}
	first, err := s.Purchase(t.Context(), req)
	require.NoError(t, err)

	adm.inFlight.Store(adm.limit) // the item is now at its limit
	_, err = s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	require.ErrorIs(t, err, inventory.ErrOverloaded, "new work is shed")
	again, err := s.Purchase(t.Context(), req)
	require.NoError(t, err, "the replay is not")
	assert.True(t, again.Replayed)
	assert.Equal(t, first.OrderID, again.OrderID)
}

func TestCancelledPurchaseWritesNothing(t *testing.T) {
	forEachBackend(t, testCancelledPurchaseWritesNothing)
}

func testCancelledPurchaseWritesNothing(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db})
	id := resetItems(t, s, 10)[0]
	for _, name := range []string{inventory.StrategyNaive, inventory.StrategyLocal, inventory.StrategyGuard} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name, Work: time.Second})
		cancel()
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", name, err)
	}
	assert.Equal(t, 10, statsOf(t, s, id).Stock)
}

func TestDatabaseClosedIsUnavailable(t *testing.T) {
	forEachBackend(t, testDatabaseClosedIsUnavailable)
}

func testDatabaseClosedIsUnavailable(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	id := resetItems(t, s, 10)[0]
	require.NoError(t, models.Close(db))

	_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	_, err = s.ListItems(t.Context())
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	assert.ErrorIs(t, s.Ready(t.Context()), inventory.ErrUnavailable)
}

// SQLITE_BUSY (another connection held the write lock past the busy timeout) is retried once,
// then answered as ErrUnavailable.
func TestDatabaseBusyRetriedOnceThenUnavailable(t *testing.T) {
	ctx := t.Context()
	_, path := openDB(t, sqliteBackend)
	db, err := models.Open(ctx, path, models.WithBusyTimeout(200*time.Millisecond))
	require.NoError(t, err)
	defer models.Close(db)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	id := resetItems(t, s, 10)[0]
	other := openPath(t, path)

	// holdWriteLock takes the write lock from another connection until d has passed or
	// release is called.
	holdWriteLock := func(d time.Duration) (release func()) {
		tx := other.Begin() // BEGIN IMMEDIATE: the write lock, at once
		require.NoError(t, tx.Error)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			select {
			case <-time.After(d):
			case <-stop:
			}
			assert.NoError(t, tx.Rollback().Error)
		}()
		var once sync.Once
		return func() { once.Do(func() { close(stop) }); <-done }
	}

	// Held for 300ms: the first attempt gives up at 200ms, the retry gets the lock.
	release := holdWriteLock(300 * time.Millisecond)
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	assert.NoError(t, err)
	release()

	// Held for up to 3s: both attempts give up, long before.
	release = holdWriteLock(3 * time.Second)
	start := time.Now()
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	assert.Less(t, time.Since(start), 2500*time.Millisecond)
	release()
	assert.Equal(t, 1, statsOf(t, s, id).SoldUnits)
}
