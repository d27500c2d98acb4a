package inventory_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// anchorCount is a CartHoldObserver: the carts its process's holds sold, by anchor item.
type anchorCount struct {
	mu        sync.Mutex
	carts     map[int64]int
	mostSales int // the most orders one hold wrote
	writing   int // the holds that wrote orders
}

func (a *anchorCount) Hold(_ string, _ int64, orders int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mostSales = max(a.mostSales, orders)
	if orders > 0 {
		a.writing++
	}
}

func (a *anchorCount) holdsWriting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.writing
}
func (a *anchorCount) CartHold(_ string, anchor int64, carts int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.carts[anchor] += carts
}

func (a *anchorCount) of(id int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.carts[id]
}

// TestCartsAcrossProcessesNeverDeadlock tries to break the argument of docs/DESIGN.md §5.3
// ("no cycle of lock waits"): carts {H,A}, both items hot, coalesced on H in one process (H is
// their lowest item, and its single purchases of H keep H's worker running) and on A in the
// other (its single purchases, mostly of A, keep A's worker running, and a cart waits at an
// item whose worker runs), with single purchases of both items, a thousand carts. Each
// process has its own Redis client, lock client and coalescing workers, as two storefronts
// do. A hold of H in the first process tries A's lock while a hold of A in the second tries
// H's: neither waits (one attempt each), the cart goes back to its queue, and after
// maxCartSkips holds its locks are taken in item order, holding nothing first. A cycle of
// waits would end only at the lock wait (10 s) as lock_timeout: every request must succeed,
// and each within the lock wait plus its work.
func TestCartsAcrossProcessesNeverDeadlock(t *testing.T) {
	forEachBackend(t, testCartsAcrossProcessesNeverDeadlock)
}

func testCartsAcrossProcessesNeverDeadlock(t *testing.T, be backend) {
	const (
		wait    = 10 * time.Second
		work    = time.Millisecond
		carts   = 1000
		workers = 6 // per process
	)
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	var queued, ordered atomic.Int64
	process := func(db *gorm.DB, obs *anchorCount) *inventory.Service {
		lc := locking.New(warmClient(t, srv), &locking.Options{KeyPrefix: lockPrefix, Wait: wait})
		t.Cleanup(func() { _ = lc.Close() })
		log := countingLogger(map[string]*atomic.Int64{"cart left queued": &queued, "taking their locks in item order": &ordered})
		s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Holds: obs, Logger: log})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	obs := []*anchorCount{{carts: map[int64]int{}}, {carts: map[int64]int{}}}
	procs := []*inventory.Service{process(db, obs[0]), process(openPath(t, path), obs[1])}
	ids := resetItems(t, procs[0], 1_000_000, 1_000_000)
	h, a := ids[0], ids[1]

	var (
		next    atomic.Int64 // carts handed out
		longest atomic.Int64 // the longest answer, in ns
		wg      sync.WaitGroup
	)
	ctx := context.Background()
	for p, s := range procs {
		for w := range workers {
			wg.Go(func() {
				for i := 0; next.Add(1) <= carts; i++ {
					// Each loop: one cart {H,A}, then a single purchase: of H in the first
					// process; of A in the second, of H one time in four.
					item := h
					if p == 1 && (i+w)%4 != 0 {
						item = a
					}
					for _, cart := range []bool{true, false} {
						start := time.Now()
						var err error
						if cart {
							_, err = s.Checkout(ctx, inventory.CheckoutRequest{Strategy: inventory.StrategyLockGuard, Work: work,
								Lines: lines(h, 1, a, 1)})
						} else {
							_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, Quantity: 1, Work: work,
								Strategy: inventory.StrategyLockGuard})
						}
						took := time.Since(start)
						for old := longest.Load(); took > time.Duration(old) && !longest.CompareAndSwap(old, int64(took)); old = longest.Load() {
						}
						if !assert.NoError(t, err, "process %d, cart %v", p+1, cart) {
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("longest answer %s; carts sold at H in process 1: %d, at A in process 2: %d; left queued %d times, locks taken in order %d times",
		time.Duration(longest.Load()), obs[0].of(h), obs[1].of(a), queued.Load(), ordered.Load())
	assert.Less(t, time.Duration(longest.Load()), wait+work, "every request answered within the lock wait plus its work")
	assert.Positive(t, obs[0].of(h), "process 1 coalesced carts on H")
	assert.Positive(t, obs[1].of(a), "process 2 coalesced carts on A")
	st := statsOf(t, procs[0], a)
	assert.Equal(t, st.InitialStock-st.Stock, st.SoldUnits, "item A: every unit taken is sold")
	assertBalanced(t, procs[0])
}

// countingLogger counts the records whose message contains each key of counts.
func countingLogger(counts map[string]*atomic.Int64) *slog.Logger {
	return slog.New(messageCounter(counts))
}

type messageCounter map[string]*atomic.Int64

func (m messageCounter) Enabled(context.Context, slog.Level) bool { return true }
func (m messageCounter) Handle(_ context.Context, r slog.Record) error {
	for w, n := range m {
		if strings.Contains(r.Message, w) {
			n.Add(1)
		}
	}
	return nil
}
func (m messageCounter) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m messageCounter) WithGroup(string) slog.Handler      { return m }
