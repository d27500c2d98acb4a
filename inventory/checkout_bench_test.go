package inventory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// BenchmarkCheckout measures carts per second, from 4×GOMAXPROCS concurrent buyers in one
// process (real redis-server), on each backend in the same run:
//
//   - hot/lines=N: every cart holds the one hot item plus N-1 items of 64 (so carts meet on
//     the hot item's lock, or its row), for N = 1, 2, 4, 8: the cost of each extra item;
//   - spread/lines=2: two items of 64, no hot item;
//   - hold+confirm: PlaceHold then ConfirmHold of a 2-line cart with the hot item, against
//     hot/lines=2's direct checkout.
func BenchmarkCheckout(b *testing.B) {
	srv := redistest.Start(b)
	for _, be := range backends {
		for _, name := range cartStrategies {
			for _, n := range []int{1, 2, 4, 8} {
				benchCheckout(b, be, srv, name, fmt.Sprintf("hot/lines=%d", n), n, true, false)
			}
			benchCheckout(b, be, srv, name, "spread/lines=2", 2, false, false)
			benchCheckout(b, be, srv, name, "hold+confirm/lines=2", 2, true, true)
		}
	}
}

func benchCheckout(b *testing.B, be backend, srv *redistest.Server, name, label string, n int, hot, hold bool) {
	b.Run(fmt.Sprintf("%s/%s/%s", be.Name, name, label), func(b *testing.B) {
		db, _ := openDB(b, be)
		s := cartService(b, db, srv, nil)
		stocks := make([]int, 65)
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
				k := int(next.Add(1))
				cart := make([]inventory.CartLine, 0, n)
				if hot {
					cart = append(cart, inventory.CartLine{ItemID: ids[0], Quantity: 1})
				}
				for j := 0; len(cart) < n; j++ {
					cart = append(cart, inventory.CartLine{ItemID: ids[1+(k*7+j*13)%64], Quantity: 1})
				}
				if hold {
					h, err := s.PlaceHold(ctx, inventory.HoldRequest{Strategy: name, Lines: cart})
					if err == nil {
						_, err = s.ConfirmHold(ctx, h.ID)
					}
					if err != nil {
						b.Error(err)
						return
					}
					continue
				}
				if _, err := s.Checkout(ctx, inventory.CheckoutRequest{Strategy: name, Lines: cart}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "carts/s")
	})
}
