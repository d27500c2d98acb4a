package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// BenchmarkPurchase measures purchases per second of each strategy, with no simulated work,
// on one hot item and spread over ten items, from 4×GOMAXPROCS concurrent buyers in one
// process (real redis-server), on each backend in the same run: an SQLite file, and the
// package's private PostgreSQL server (loopback TCP, fsync off, commits written to the kernel:
// the durability of SQLite's synchronous=NORMAL). Next to lock+guard it measures what a user
// would pick for a hot item instead, when the demo strategies are built in
// (bench_demo_test.go): the flash-sale pattern redis-stock with and without the guard, and the
// lockless optimistic.
func BenchmarkPurchase(b *testing.B) {
	srv := redistest.Start(b)
	for _, be := range backends {
		for _, name := range append([]string{inventory.StrategyNaive, inventory.StrategyLocal, inventory.StrategyLock,
			inventory.StrategyGuard, inventory.StrategyLockGuard}, benchDemo.names...) {
			for _, items := range []int{1, 10} {
				benchPurchase(b, be, srv, name, items)
			}
		}
	}
}

func benchPurchase(b *testing.B, be backend, srv *redistest.Server, name string, items int) {
	b.Run(fmt.Sprintf("%s/%s/items=%d", be.Name, name, items), func(b *testing.B) {
		db, _ := openDB(b, be)
		var s *inventory.Service
		if slices.Contains(benchDemo.names, name) {
			s = benchDemo.service(b, db, srv)
		} else {
			s, _ = lockService(b, db, srv, locking.Options{}, nil)
		}
		stocks := make([]int, items)
		for i := range stocks {
			stocks[i] = 1 << 30
		}
		ids := resetItems(b, s, stocks...)
		var next, retries, gaveUp atomic.Int64
		ctx := context.Background()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := ids[int(next.Add(1))%len(ids)]
				rec, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name})
				if name == benchDemo.retrying && errors.Is(err, inventory.ErrOverloaded) {
					gaveUp.Add(1) // its retries are bounded: a buyer that lost every round gives up
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				retries.Add(int64(rec.Retries))
			}
		})
		// Purchases that sold; for optimistic, its version conflicts per attempt and the share
		// of buyers that gave up after maxOptimisticRetries conflicts in a row.
		b.ReportMetric(float64(int64(b.N)-gaveUp.Load())/b.Elapsed().Seconds(), "purchases/s")
		if name == benchDemo.retrying {
			b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
			b.ReportMetric(float64(gaveUp.Load())/float64(b.N), "gave-up/op")
		}
	})
}

// benchDemo is what BenchmarkPurchase measures beyond the built-in strategies: the demo ones,
// when they are built in (bench_demo_test.go sets it).
var benchDemo struct {
	names    []string
	retrying string // the strategy whose buyers give up after bounded retries
	service  func(b *testing.B, db *gorm.DB, srv *redistest.Server) *inventory.Service
}
