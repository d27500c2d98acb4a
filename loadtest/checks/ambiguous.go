package checks

import (
	"net/http"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/client"
)

// ambiguous reports whether r is a server error whose purchase may have been written: the
// storefront lost its database (or its process) around the commit and cannot tell whether the
// commit landed ("unavailable", "internal"). Its outcome is unknown to the client, who replays
// it with its key, as after a lost answer. A refusal before any write
// (linearize.RefusedBeforeWrite, the history's rule too) is not.
func ambiguous(r client.PurchaseResult) bool {
	return r.Status >= http.StatusInternalServerError && !linearize.RefusedBeforeWrite(r.Status, r.Code)
}

// Ambiguous reports whether no attempt or replay of p got a 2xx and some got an ambiguous
// server error: its purchase may have been written (workload.ResolveAmbiguous replays it).
func Ambiguous(p *client.Purchase) bool {
	unknown := false
	for _, r := range append(append([]client.PurchaseResult{}, p.Attempts...), p.Replays...) {
		if r.Status >= 200 && r.Status < 300 {
			return false
		}
		unknown = unknown || ambiguous(r)
	}
	return unknown
}
