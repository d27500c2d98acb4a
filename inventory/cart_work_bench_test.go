package inventory_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// BenchmarkHotCartsWithWork measures carts per second of guard and lock+guard (streaming while
// alone, the storefront's default) when every cart holds the hot item, with 0 to 2 of four
// cold items, and 20 ms of work (a payment call): 32 buyers in one process (real
// redis-server), on each backend in the same run. It is the in-process form of the load
// test's routed `-workload cart -hot 1 -work 20ms` (docs/measured.md#carts): one process
// serves every cart of the hot item. Compare the two strategies' carts/s within one run.
func BenchmarkHotCartsWithWork(b *testing.B) {
	srv := redistest.Start(b)
	for _, be := range backends {
		for _, name := range []string{inventory.StrategyGuard, inventory.StrategyLockGuard} {
			b.Run(fmt.Sprintf("%s/%s", be.Name, name), func(b *testing.B) {
				_, path := openDB(b, be)
				s := lockGuardService(b, srv, path, inventory.Config{StreamAlone: true}, nil)
				ids := resetItems(b, s, 1<<30, 1<<30, 1<<30, 1<<30, 1<<30)
				var next, lat atomic.Int64
				ctx := context.Background()
				b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						k := int(next.Add(1))
						cart := []inventory.CartLine{{ItemID: ids[0], Quantity: 1}}
						for j := 0; j < k%3; j++ {
							cart = append(cart, inventory.CartLine{ItemID: ids[1+(k+j)%4], Quantity: 1})
						}
						t0 := time.Now()
						_, err := s.Checkout(ctx, inventory.CheckoutRequest{Strategy: name, Lines: cart, Work: 20 * time.Millisecond})
						lat.Add(int64(time.Since(t0)))
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "carts/s")
				b.ReportMetric(float64(time.Duration(lat.Load()/int64(b.N)).Microseconds())/1000, "ms/cart")
			})
		}
	}
}
