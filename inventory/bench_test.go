package inventory_test

import (
	"context"
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
	b.Run(fmt.Sprintf("%s/%s/items=%d", be.name, name, items), func(b *testing.B) {
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
		var next atomic.Int64
		ctx := context.Background()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := ids[int(next.Add(1))%len(ids)]
				if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "purchases/s")
	})
}
