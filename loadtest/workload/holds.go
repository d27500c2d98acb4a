package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// What the hold workload does with a hold once placed.
const (
	fateConfirm = "confirm" // the buyer pays (the client's work), then confirms
	fateCancel  = "cancel"  // the buyer gives up after the same time
	fateExpire  = "expire"  // the buyer walks away: the hold expires
)

// The shares of the fates (the rest expires).
const (
	shareConfirm = 0.4
	shareCancel  = 0.3
)

// hold is one hold of the hold workload: its key, its cart, its placement, and what followed.
type hold struct {
	Key      string // the Idempotency-Key of its placement (the orders' key space: "<base>-h<seq>")
	Lines    []client.CartLine
	Merged   []client.CartLine
	Instance int
	Fate     string
	Attempts []client.CartResult // POST /api/holds under Key: once, or twice with -retry (the copy to the next instance)
	Replays  []client.CartResult // POST /api/holds under Key after the run, when no attempt got an answer
	Place    client.CartResult   // the answer that decides: the first 201 or 200 (its hold), else the first attempt's
	Confirms []client.CartResult // POST /api/holds/:id/confirm (the late one after the run included)
	Cancels  []client.CartResult // DELETE /api/holds/:id
	Late     bool                // left to expire, then confirmed after its expiry on purpose (must be refused)
	Final    client.HoldBody     // GET /api/holds/:id after the run (Status "" when not read)
	Paid     time.Duration
}

// placed reports whether the hold was answered 201, or 200 (the key's hold replayed): it
// exists, with an id.
func (h *hold) placed() bool {
	return (h.Place.Status == 201 || h.Place.Status == 200) && h.Place.Hold.ID > 0
}

// holdStrategy is the strategy that places the holds of a run of strategy: the strategy
// itself, or guard for one that places no holds (naive: its checkouts then race the holds).
func holdStrategy(strategy string) string {
	for _, s := range holdStrategies {
		if s == strategy {
			return s
		}
	}
	if strategy == "" {
		return ""
	}
	return "guard"
}

// executeHold places hold seq on instance under its key (with -retry twice: placeHold) and
// carries out its fate: confirm or cancel after the client's work (the payment, done while the
// units are held and no lock is), or nothing.
func (w *Workload) executeHold(ctx context.Context, rng *rand.Rand, seq, instance int) *hold {
	h := &hold{Key: fmt.Sprintf("%s-h%d", w.keyBase, seq), Lines: w.nextCart(rng, w.holdItems())}
	h.Merged = mergeCart(h.Lines)
	h.Instance = w.instanceOf(client.RouteItem(h.Lines), instance) // routed by item: its routing key's instance
	switch f := rng.Float64(); {
	case f < shareConfirm:
		h.Fate = fateConfirm
	case f < shareConfirm+shareCancel:
		h.Fate = fateCancel
	default:
		h.Fate = fateExpire
	}
	h.Late = h.Fate == fateExpire && seq%2 == 0
	a := w.apis[h.Instance]
	w.placeHold(ctx, h, seq, w.cfg.Retry > 0 && rng.Float64() < w.cfg.Retry)
	defer w.done.Add(1)
	if !h.placed() || h.Fate == fateExpire {
		return h
	}
	start := time.Now()
	if !sleepCtx(ctx, w.work) {
		return h
	}
	h.Paid = time.Since(start)
	var r client.CartResult
	if h.Fate == fateConfirm {
		r = a.ConfirmHold(ctx, h.Place.Hold.ID)
		h.Confirms = append(h.Confirms, r)
	} else {
		r = a.CancelHold(ctx, h.Place.Hold.ID)
		h.Cancels = append(h.Cancels, r)
	}
	w.sends.Add(1)
	w.recordCart(r)
	return h
}

// holdItems are the items holds are placed on: every item but the last one when there are
// several, so that the checked history keeps one item that no hold touches (a hold's cancel or
// expiry puts units back, which the history's model cannot order: cartHistory).
func (w *Workload) holdItems() []client.Item {
	if len(w.items) < 2 {
		return w.items
	}
	return w.items[:len(w.items)-1]
}

// sleepCtx waits d; false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unknown reports whether the last of rs got no answer, or one after which the request may
// have taken effect (5xx).
func unknown(rs []client.CartResult) bool {
	return len(rs) > 0 && (rs[len(rs)-1].Status == 0 || rs[len(rs)-1].Status >= 500)
}

// reconcileHolds places again, under its key, every hold whose placement got no answer (or a
// 5xx) from any attempt (replayPlacement), and sends again every confirmation or cancellation
// whose outcome is unknown (both are idempotent), up to 3 times each. lost counts the
// placements no attempt got an answer for.
func (w *Workload) reconcileHolds(ctx context.Context) (replayed, unresolved, lost int) {
	for _, h := range w.holdList {
		if unknownPlacement(h.Attempts) {
			lost++
			replayed++
			if !w.replayPlacement(ctx, h) {
				unresolved++
			}
			continue
		}
		if !h.placed() {
			continue
		}
		for _, p := range []*[]client.CartResult{&h.Confirms, &h.Cancels} {
			if !unknown(*p) {
				continue
			}
			replayed++
			for try := 0; try < 3 && ctx.Err() == nil && unknown(*p); try++ {
				a := w.apis[(h.Instance+try+1)%len(w.apis)]
				if p == &h.Confirms {
					*p = append(*p, a.ConfirmHold(ctx, h.Place.Hold.ID))
				} else {
					*p = append(*p, a.CancelHold(ctx, h.Place.Hold.ID))
				}
			}
			if unknown(*p) {
				unresolved++
			}
		}
	}
	return replayed, unresolved, lost
}

// expireHolds waits until every hold placed has expired (by the expiry the server answered,
// on the one clock of the machine; bounded by the ttl and the client timeout), confirms
// every other hold left to expire (the server must refuse it: hold_expired, and give its units
// back), and reads every hold's final state.
func (w *Workload) expireHolds(ctx context.Context) error {
	var last time.Time
	for _, h := range w.holdList {
		if h.placed() && h.Place.Hold.ExpiresAt.After(last) {
			last = h.Place.Hold.ExpiresAt
		}
	}
	if wait := time.Until(last) + 20*time.Millisecond; wait > 0 {
		if !sleepCtx(ctx, min(wait, w.cfg.HoldTTL+w.cfg.Timeout)) {
			return ctx.Err()
		}
	}
	for _, h := range w.holdList {
		if h.placed() && h.Late {
			r := w.apis[h.Instance].ConfirmHold(ctx, h.Place.Hold.ID)
			h.Confirms = append(h.Confirms, r)
		}
	}
	for _, h := range w.holdList {
		if !h.placed() {
			continue
		}
		hb, err := w.apis[0].GetHold(ctx, h.Place.Hold.ID)
		if err != nil {
			return fmt.Errorf("GET /api/holds/%d: %w", h.Place.Hold.ID, err)
		}
		h.Final = hb
	}
	return nil
}

// resale buys, once every hold has expired, what each item should have left (its initial
// stock − its sold units, per stats), in checkouts of at most 1000 units with strategy, and
// returns the units sold and the checkouts not answered 201.
func (w *Workload) resale(ctx context.Context, stats []client.ItemStats, strategy string) (sold int, refused []string) {
	for _, s := range stats {
		left := s.InitialStock - s.SoldUnits
		for n := 0; left > 0 && ctx.Err() == nil; n++ {
			q := min(left, 1000)
			key := fmt.Sprintf("%s-resale-%d-%d", w.keyBase, s.ItemID, n)
			r := w.apis[0].Checkout(ctx, []client.CartLine{{ItemID: s.ItemID, Quantity: q}}, key, strategy, 0)
			if r.Status != 201 {
				refused = append(refused, fmt.Sprintf("item %d: %d of the %d units left were refused: %d %s %s",
					s.ItemID, q, s.InitialStock-s.SoldUnits, r.Status, r.Code, oneLine(fmt.Sprint(r.Err))))
				break
			}
			left -= q
			sold += q
		}
	}
	return sold, refused
}
