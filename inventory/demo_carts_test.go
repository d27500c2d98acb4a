//go:build !nodemo

package inventory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// meeting lets parties goroutines through once all have arrived (or ctx ends).
type meeting struct {
	mu      sync.Mutex
	parties int
	all     chan struct{}
}

func newMeeting(parties int) *meeting { return &meeting{parties: parties, all: make(chan struct{})} }

func (m *meeting) arrive(ctx context.Context) error {
	m.mu.Lock()
	if m.parties--; m.parties == 0 {
		close(m.all)
	}
	m.mu.Unlock()
	select {
	case <-m.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// crossing is the barrier of two crossed carts, in one test process: the lab's is in Redis.
type crossing struct{ first, ended *meeting }

func (c crossing) FirstLock(ctx context.Context) error { return c.first.arrive(ctx) }
func (c crossing) LocksEnded(ctx context.Context)      { _ = c.ended.arrive(ctx) }

// request-order takes a cart's locks one at a time in the order of its lines: crossed carts
// {A,B} and {B,A} (two processes) that both hold their first lock before either asks for its
// second wait for each other until their lock waits end, and nothing sells; alone, a cart
// sells, fenced by each item's lock.
func TestRequestOrderCartsDeadlock(t *testing.T) { forEachBackend(t, testRequestOrderCartsDeadlock) }

func testRequestOrderCartsDeadlock(t *testing.T, be backend) {
	srv := redistest.Start(t)
	const wait = 300 * time.Millisecond
	service := func(db *gorm.DB) *inventory.Service {
		lc := locking.New(warmClient(t, srv), &locking.Options{KeyPrefix: lockPrefix, Wait: wait})
		t.Cleanup(func() { _ = lc.Close() })
		return newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc)})
	}
	db, path := openDB(t, be)
	s1, s2 := service(db), service(openPath(t, path))
	ids := resetItems(t, s1, 5, 5)
	a, b := ids[0], ids[1]
	ctx := t.Context()

	for run := range 3 {
		cross := crossing{first: newMeeting(2), ended: newMeeting(2)}
		errs := make([]error, 2)
		start := time.Now()
		var wg sync.WaitGroup
		for i, cart := range [][]inventory.CartLine{lines(a, 1, b, 1), lines(b, 1, a, 1)} {
			wg.Go(func() {
				_, errs[i] = []*inventory.Service{s1, s2}[i].DemoCheckout(ctx, inventory.DemoCheckoutRequest{
					Lines: cart, Strategy: inventory.StrategyRequestOrder, Intercept: cross})
			})
		}
		wg.Wait()
		for i, err := range errs {
			assert.ErrorIs(t, err, inventory.ErrLockTimeout, "run %d, cart %d", run, i)
		}
		assert.GreaterOrEqual(t, time.Since(start), wait, "run %d: only the lock wait ended it", run)
		assert.Equal(t, 5, statsOf(t, s1, a).Stock, "run %d", run)
		assert.Equal(t, 5, statsOf(t, s1, b).Stock, "run %d", run)
	}

	rec, err := s1.DemoCheckout(ctx, inventory.DemoCheckoutRequest{Lines: lines(b, 2, a, 1), Strategy: inventory.StrategyRequestOrder})
	require.NoError(t, err)
	assert.Equal(t, inventory.StrategyRequestOrder, rec.Strategy)
	require.Len(t, rec.Lines, 2)
	for _, l := range rec.Lines {
		assert.Positive(t, l.FenceToken, "item %d: fenced by its lock", l.ItemID)
	}
	assert.Equal(t, 4, statsOf(t, s1, a).Stock)
	assert.Equal(t, 3, statsOf(t, s1, b).Stock)
	assertBalanced(t, s1)

	// Without the lock service: unavailable, nothing sold.
	plain := newService(t, inventory.Config{DB: db})
	_, err = plain.DemoCheckout(ctx, inventory.DemoCheckoutRequest{Lines: lines(a, 1), Strategy: inventory.StrategyRequestOrder})
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
}

// line-by-line checks each line alone against the stock it read: two lines of one unit of an
// item that has one each pass, and both are taken off (stock -1, sold 2 of 1); a line that
// alone does not fit refuses the cart, naming it.
func TestLineByLineCartOversells(t *testing.T) { forEachBackend(t, testLineByLineCartOversells) }

func testLineByLineCartOversells(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db})
	ids := resetItems(t, s, 1, 3)
	a, b := ids[0], ids[1]
	ctx := t.Context()

	rec, err := s.DemoCheckout(ctx, inventory.DemoCheckoutRequest{Lines: lines(a, 1, b, 1, a, 1), Strategy: inventory.StrategyLineByLine})
	require.NoError(t, err)
	assert.Equal(t, []inventory.LineReceipt{{ItemID: a, Quantity: 2, Remaining: -1}, {ItemID: b, Quantity: 1, Remaining: 2}}, rec.Lines)
	st := statsOf(t, s, a)
	assert.Equal(t, -1, st.Stock)
	assert.Equal(t, 2, st.SoldUnits)
	assert.Equal(t, 1, st.OversoldUnits)

	_, err = s.DemoCheckout(ctx, inventory.DemoCheckoutRequest{Lines: lines(b, 1, b, 3), Strategy: inventory.StrategyLineByLine})
	var short *inventory.ShortLinesError
	require.True(t, errors.As(err, &short), "%v", err)
	assert.Equal(t, []inventory.ShortLine{{ItemID: b, Requested: 3, Available: 2}}, short.Lines)
	assert.Equal(t, 2, statsOf(t, s, b).Stock, "nothing sold")

	// The fix, guard: the lines merged, checked in the transaction that writes them.
	_, err = s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(b, 2, b, 2), Strategy: inventory.StrategyGuard})
	assert.ErrorIs(t, err, inventory.ErrInsufficientStock)
	assert.Equal(t, 2, statsOf(t, s, b).Stock)
}

// DemoCheckout sells the demo cart strategies only, and the interceptor goes with
// request-order only.
func TestDemoCheckoutValidation(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	s := newService(t, inventory.Config{DB: db})
	a := resetItems(t, s, 5)[0]
	for _, req := range []inventory.DemoCheckoutRequest{
		{Lines: lines(a, 1), Strategy: inventory.StrategyGuard},
		{Lines: lines(a, 1), Strategy: ""},
		{Lines: lines(a, 1), Strategy: inventory.StrategyLineByLine, Intercept: crossing{}},
		{Lines: nil, Strategy: inventory.StrategyLineByLine},
		{Lines: lines(a, 1), Strategy: inventory.StrategyLineByLine, Work: -time.Second},
	} {
		_, err := s.DemoCheckout(t.Context(), req)
		assert.ErrorIs(t, err, inventory.ErrInvalid, "%+v", req)
	}
	_, err := s.DemoCheckout(t.Context(), inventory.DemoCheckoutRequest{Lines: lines(a+100, 1), Strategy: inventory.StrategyLineByLine})
	assert.ErrorIs(t, err, inventory.ErrNotFound)
	names := []string{}
	for _, info := range inventory.DemoCartStrategies() {
		assert.True(t, info.Demo, info.Name)
		names = append(names, info.Name)
	}
	assert.Equal(t, []string{inventory.StrategyRequestOrder, inventory.StrategyLineByLine}, names)
}
