package workload

import (
	"context"

	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/client"
)

// ResolveAmbiguous replays, with the same key, every purchase without a 2xx answer that got an
// ambiguous server error (ambiguous) and whose key has an order row: the replay's 200 is the
// answer the lost commit never gave (a crash restart of the database between the commit and
// its acknowledgement). A purchase answered only with refusals or sold out keeps an order row
// it should not have: that stays an ORDER MISMATCH. It returns the purchases replayed.
func (w *Workload) ResolveAmbiguous(ctx context.Context, orders []client.Order) int {
	keyed := make(map[string]bool, len(orders))
	for _, o := range orders {
		if o.IdempotencyKey != nil {
			keyed[*o.IdempotencyKey] = true
		}
	}
	replayed := 0
	for _, p := range w.results {
		if !keyed[p.Key] || !checks.Ambiguous(p) {
			continue
		}
		replayed++
		req := client.PurchaseReq{ItemID: p.ItemID, Quantity: p.Quantity, Key: p.Key, Strategy: w.strategy}
		for try := 0; try < 3 && ctx.Err() == nil; try++ {
			r := w.buy(ctx, w.apis[(p.Instance+try)%len(w.apis)], req)
			p.Replays = append(p.Replays, r)
			if r.Status >= 200 && r.Status < 300 {
				break
			}
		}
	}
	return replayed
}

// Reconcile replays, with the same key, every purchase whose outcome is unknown (no 2xx, and a
// request lost to a client timeout): a 200 shows the original did create an order, a 201 that it
// did not and the replay did, an error that nothing was sold. Bounded: 3 tries per purchase.
func (w *Workload) Reconcile(ctx context.Context) (replayed, unresolved int) {
	for _, p := range w.results {
		if p.Settled() {
			continue
		}
		replayed++
		req := client.PurchaseReq{ItemID: p.ItemID, Quantity: p.Quantity, Key: p.Key, Strategy: w.strategy}
		for try := 0; try < 3 && ctx.Err() == nil && !p.Settled(); try++ {
			p.Replays = append(p.Replays, w.buy(ctx, w.apis[(p.Instance+try)%len(w.apis)], req))
		}
		if !p.Settled() {
			unresolved++
		}
	}
	return replayed, unresolved
}
