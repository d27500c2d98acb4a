package inventory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

func newAdmission(t *testing.T, srv *redistest.Server, permits int, wait time.Duration) inventory.Admission {
	t.Helper()
	sem := locking.NewSemaphore(warmClient(t, srv), permits, &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = sem.Close() })
	return inventory.NewAdmission(sem, wait)
}

func TestAdmissionLimitsInFlight(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	adm := newAdmission(t, srv, 2, 50*time.Millisecond)
	ctx := context.Background()

	r1, err := adm.Acquire(ctx, 7)
	require.NoError(t, err)
	r2, err := adm.Acquire(ctx, 7)
	require.NoError(t, err)
	start := time.Now()
	_, err = adm.Acquire(ctx, 7)
	assert.ErrorIs(t, err, inventory.ErrOverloaded)
	assert.Less(t, time.Since(start), time.Second, "sheds after a short wait")
	r3, err := adm.Acquire(ctx, 8)
	require.NoError(t, err, "another item has its own permits")
	r1()
	r4, err := adm.Acquire(ctx, 7)
	require.NoError(t, err, "a released permit admits the next purchase")
	for _, r := range []func(){r2, r3, r4} {
		r()
	}

	srv.Stop()
	_, err = adm.Acquire(ctx, 7)
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
}

// A burst through a Service with an admission limit of 3: some purchases are shed with
// ErrOverloaded, the others sell safely, and never more than 3 are in flight at once.
func TestServiceAdmissionSheds(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	var inFlight, most atomic.Int64
	s := newService(t, inventory.Config{
		DB:        db,
		Admission: newAdmission(t, srv, 3, 20*time.Millisecond),
		Sleep: func(ctx context.Context, d time.Duration) error {
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(d)
			inFlight.Add(-1)
			return nil
		},
	})
	id := resetItems(t, s, 1000)[0]
	var wg sync.WaitGroup
	var ok, shed atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Purchase(context.Background(), inventory.PurchaseRequest{
				ItemID: id, Quantity: 1, Strategy: inventory.StrategyGuard, Work: 50 * time.Millisecond})
			switch {
			case err == nil:
				ok.Add(1)
			case assert.ErrorIs(t, err, inventory.ErrOverloaded):
				shed.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(3))
	assert.Positive(t, ok.Load())
	assert.Positive(t, shed.Load())
	assert.EqualValues(t, ok.Load(), statsOf(t, s, id).SoldUnits)
}
