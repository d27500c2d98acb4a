package main

import (
	"context"
	"net/http"
)

// refusedBeforeWrite are the 5xx codes a storefront answers before any write: a purchase
// answered with one of them wrote nothing.
var refusedBeforeWrite = map[string]bool{"at_capacity": true, "lock_timeout": true, "lock_lost": true}

// ambiguous reports whether r is a server error whose purchase may have been written: the
// storefront lost its database (or its process) around the commit and cannot tell whether the
// commit landed ("unavailable", "internal"). Its outcome is unknown to the client, who replays
// it with its key, as after a lost answer.
func ambiguous(r purchaseResult) bool {
	return r.Status >= http.StatusInternalServerError && !refusedBeforeWrite[r.Code]
}

// resolveAmbiguous replays, with the same key, every purchase without a 2xx answer that got an
// ambiguous server error (ambiguous) and whose key has an order row: the replay's 200 is the
// answer the lost commit never gave (a crash restart of the database between the commit and
// its acknowledgement). A purchase answered only with refusals or sold out keeps an order row
// it should not have: that stays an ORDER MISMATCH. It returns the purchases replayed.
func (w *workload) resolveAmbiguous(ctx context.Context, orders []order) int {
	keyed := make(map[string]bool, len(orders))
	for _, o := range orders {
		if o.IdempotencyKey != nil {
			keyed[*o.IdempotencyKey] = true
		}
	}
	replayed := 0
	for _, p := range w.results {
		if !keyed[p.Key] || !p.ambiguous() {
			continue
		}
		replayed++
		req := purchaseReq{ItemID: p.ItemID, Quantity: p.Quantity, Key: p.Key, Strategy: w.strategy}
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

// ambiguous reports whether no attempt or replay of p got a 2xx and some got an ambiguous
// server error.
func (p *purchase) ambiguous() bool {
	unknown := false
	for _, r := range append(append([]purchaseResult{}, p.Attempts...), p.Replays...) {
		if r.Status >= 200 && r.Status < 300 {
			return false
		}
		unknown = unknown || ambiguous(r)
	}
	return unknown
}
