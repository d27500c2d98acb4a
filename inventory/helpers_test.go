package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/inventory"
)

// dbs are the database backends of this package's tests (its PostgreSQL server starts on
// first use).
var dbs = dbtest.NewSet("inventory.db")

func TestMain(m *testing.M) {
	code := m.Run()
	dbs.Close()
	os.Exit(code)
}

type backend = dbtest.Backend

var (
	sqliteBackend   = dbs.SQLite
	postgresBackend = dbs.Postgres
	backends        = dbs.All()
)

// forEachBackend runs test once per backend, as subtests named after the backend.
func forEachBackend(t *testing.T, test func(t *testing.T, be backend)) { dbs.ForEach(t, test) }

// openDB opens a fresh database of backend b; the returned dsn opens it again.
func openDB(t testing.TB, b backend) (*gorm.DB, string) {
	t.Helper()
	return b.Open(t)
}

// openPath opens path (a file or a postgres:// URL) again, as another process would.
func openPath(t testing.TB, path string) *gorm.DB {
	t.Helper()
	return dbtest.Open(t, path)
}

func newService(t testing.TB, cfg inventory.Config) *inventory.Service {
	t.Helper()
	s, err := inventory.NewService(cfg)
	require.NoError(t, err)
	return s
}

// resetItems replaces the catalogue with one item per stock value and returns their ids.
func resetItems(t testing.TB, s *inventory.Service, stocks ...int) []int64 {
	t.Helper()
	items := make([]inventory.NewItem, len(stocks))
	for i, st := range stocks {
		items[i] = inventory.NewItem{SKU: fmt.Sprintf("SKU-%d", i), Name: fmt.Sprintf("item %d", i), Stock: st, PriceCents: 100}
	}
	ctx := context.Background()
	require.NoError(t, s.Reset(ctx, items))
	list, err := s.ListItems(ctx)
	require.NoError(t, err)
	require.Len(t, list, len(stocks))
	ids := make([]int64, len(list))
	for i, it := range list {
		ids[i] = it.ID
	}
	return ids
}

// outcome counts the results of a burst of purchases.
type outcome struct {
	mu       sync.Mutex
	ok       int
	units    int
	errs     map[string]int
	samples  map[string]string // one full message per kind, for failure reports
	retried  atomic.Int64      // purchases retried after ErrUnavailable
	receipts []inventory.Receipt
}

func (o *outcome) add(rec inventory.Receipt, err error, quantity int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		o.ok++
		o.units += quantity
		o.receipts = append(o.receipts, rec)
		return
	}
	if o.errs == nil {
		o.errs = map[string]int{}
	}
	o.errs[errKind(err)]++
	if o.samples == nil {
		o.samples = map[string]string{}
	}
	if _, ok := o.samples[errKind(err)]; !ok {
		o.samples[errKind(err)] = err.Error()
	}
}

func errKind(err error) string {
	for _, s := range []error{inventory.ErrSoldOut, inventory.ErrInsufficientStock, inventory.ErrLockLost,
		inventory.ErrLockTimeout, inventory.ErrUnavailable, inventory.ErrNotFound, inventory.ErrInvalid,
		inventory.ErrIdempotencyConflict, inventory.ErrOverloaded} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "unexpected: " + err.Error()
}

// burst starts n purchases of 1..3 units (i%3+1) of itemID at once, spread round-robin over
// services, and waits for them.
func burst(t testing.TB, services []*inventory.Service, strategy string, itemID int64, n int, work time.Duration) *outcome {
	t.Helper()
	return burstWith(t, services, strategy, itemID, n, func(int) time.Duration { return work })
}

// burstWith is burst with a simulated work per purchase.
func burstWith(t testing.TB, services []*inventory.Service, strategy string, itemID int64, n int, work func(i int) time.Duration) *outcome {
	t.Helper()
	var (
		o     outcome
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			q := i%3 + 1
			<-start
			req := inventory.PurchaseRequest{ItemID: itemID, Quantity: q, Strategy: strategy, Work: work(i)}
			rec, err := services[i%len(services)].Purchase(ctx, req)
			// A client retries a 503 unavailable: on a loaded machine a lock with a short lease
			// (hence a call timeout of a few ms) can time out its Redis call.
			for retry := 0; retry < 5 && errors.Is(err, inventory.ErrUnavailable); retry++ {
				o.retried.Add(1)
				time.Sleep(20 * time.Millisecond)
				rec, err = services[i%len(services)].Purchase(ctx, req)
			}
			o.add(rec, err, q)
		}(i)
	}
	close(start)
	wg.Wait()
	for kind := range o.errs {
		assert.NotContains(t, kind, "unexpected", "strategy %s", strategy)
	}
	return &o
}

func statsOf(t testing.TB, s *inventory.Service, itemID int64) inventory.ItemStats {
	t.Helper()
	all, err := s.Stats(context.Background())
	require.NoError(t, err)
	for _, st := range all {
		if st.ItemID == itemID {
			return st
		}
	}
	t.Fatalf("no stats for item %d", itemID)
	return inventory.ItemStats{}
}

// assertSafe checks the invariants of docs/DESIGN.md §12 for one item after a burst.
func assertSafe(t testing.TB, s *inventory.Service, itemID int64, o *outcome) {
	t.Helper()
	st := statsOf(t, s, itemID)
	assert.GreaterOrEqual(t, st.Stock, 0, "stock never negative")
	assert.Zero(t, st.OversoldUnits, "never oversold")
	assert.Equal(t, st.InitialStock, st.Stock+st.SoldUnits, "no lost update: stock + sold == initial")
	assert.Equal(t, o.units, st.SoldUnits, "every success is one order, nothing else is")
	assert.Equal(t, o.ok, st.OrderCount)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// purchase is Service.Purchase retried, like a client retrying a 503, while it answers
// ErrUnavailable (a short lease's Redis call timing out on a loaded machine). It also returns
// how long the last attempt took.
func purchase(s *inventory.Service, ctx context.Context, req inventory.PurchaseRequest) (inventory.Receipt, time.Duration, error) {
	for retry := 0; ; retry++ {
		start := time.Now()
		rec, err := s.Purchase(ctx, req)
		if retry == 5 || !errors.Is(err, inventory.ErrUnavailable) {
			return rec, time.Since(start), err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
