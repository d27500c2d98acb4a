package client

// Purchase is one logical purchase: one Idempotency-Key, sent once or twice (-retry), and
// replayed after the run when no attempt got an HTTP answer.
type Purchase struct {
	Key      string
	ItemID   int64
	Quantity int
	Instance int
	Attempts []PurchaseResult
	Replays  []PurchaseResult
}

// Settled reports whether the outcome of the purchase is known: some attempt or replay got a
// 2xx answer (an order, with its id), or every one got an HTTP answer (errors write nothing).
// A purchase with no 2xx and a request without answer (a client timeout) may or may not have
// an order: it is replayed.
func (p *Purchase) Settled() bool {
	unanswered := false
	for _, r := range append(append([]PurchaseResult{}, p.Attempts...), p.Replays...) {
		if r.Status >= 200 && r.Status < 300 {
			return true
		}
		if r.Status == 0 {
			unanswered = true
		}
	}
	if len(p.Replays) > 0 { // only the last replay tells: the earlier ones had no answer
		return p.Replays[len(p.Replays)-1].Status != 0
	}
	return !unanswered
}
