package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/pitfalls"
)

// BenchmarkPurchase measures purchases per second of each strategy, with no simulated work,
// on one hot item and spread over ten items, from 4×GOMAXPROCS concurrent buyers in one
// process (real redis-server), on each backend in the same run: an SQLite file, and the
// package's private PostgreSQL server (loopback TCP, fsync off, commits written to the kernel:
// the durability of SQLite's synchronous=NORMAL). Next to lock+guard it measures what a user
// would pick for a hot item instead (demo strategies, issue 14): the flash-sale pattern
// redis-stock with and without the guard, and the lockless optimistic.
func BenchmarkPurchase(b *testing.B) {
	srv := redistest.Start(b)
	for _, be := range backends {
		for _, name := range []string{inventory.StrategyNaive, inventory.StrategyLocal, inventory.StrategyLock,
			inventory.StrategyGuard, inventory.StrategyLockGuard,
			inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyOptimistic} {
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
		if inventory.DemoOnly(name) {
			rdb := warmClient(b, srv)
			lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix})
			b.Cleanup(func() { _ = lc.Close() })
			s = newService(b, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Demo: true,
				Mirror: pitfalls.NewMirror(rdb, inventory.StockKeyPrefix)})
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
				if name == inventory.StrategyOptimistic && errors.Is(err, inventory.ErrOverloaded) {
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
		if name == inventory.StrategyOptimistic {
			b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
			b.ReportMetric(float64(gaveUp.Load())/float64(b.N), "gave-up/op")
		}
	})
}
