package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/verdict"
)

// cartStep runs operation n of a cart workload on instance: a checkout, or under -workload
// holds a hold (a checkout with probability holdsDirect).
func (w *workload) cartStep(ctx context.Context, rng *rand.Rand, n, instance int) {
	if w.cfg.Workload == WorkloadHolds && rng.Float64() >= holdsDirect {
		h := w.executeHold(ctx, rng, n, instance)
		w.resMu.Lock()
		w.holdList = append(w.holdList, h)
		w.resMu.Unlock()
		return
	}
	c := w.executeCart(ctx, rng, n, instance)
	w.resMu.Lock()
	w.cartList = append(w.cartList, c)
	w.resMu.Unlock()
}

// sampleEvery is how often a cart workload samples GET /api/stats during the run.
const sampleEvery = 100 * time.Millisecond

// statsSampler reads GET /api/stats every sampleEvery until stopped: each answer is one
// consistent snapshot of every item (one statement), in which sold + held ≤ initial and
// initial − stock = sold + held must hold at every instant, not only at the end.
type statsSampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples [][]ItemStats
}

// startSampler starts sampling a's stats; stopSampling stops it and returns the samples.
func startSampler(ctx context.Context, a *api) *statsSampler {
	s := &statsSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // owner: the strategy's run, which calls stopSampling
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second) // an instance paused (-chaos pause) answers late: skip it
			st, err := a.stats(cctx)
			cancel()
			if err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, st)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *statsSampler) stopSampling() [][]ItemStats {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// cartOutcome is what a cart workload's run ends with.
type cartOutcome struct {
	stats              []ItemStats
	orders             []order
	findings           verdict.Findings
	replays, unresolve int
	figures            *CartFigures
}

// finishCarts settles a cart workload's run: it replays the checkouts (and confirmations,
// cancellations) of unknown outcome; under -workload holds waits until every hold has expired
// and confirms half of those left to expire (each must be refused); reads the items and the
// orders; under -workload holds buys back what every item should have left (the expired
// holds' units must be sellable); and checks every invariant (verdict.CheckCarts).
func (w *workload) finishCarts(ctx context.Context, admin *api, strategy string, samples [][]ItemStats, elapsed time.Duration) (*cartOutcome, error) {
	out := &cartOutcome{}
	out.replays, out.unresolve = w.reconcileCarts(ctx)
	var lost int
	if w.cfg.Workload == WorkloadHolds {
		r, u, l := w.reconcileHolds(ctx)
		out.replays, out.unresolve, lost = out.replays+r, out.unresolve+u, l
		if err := w.expireHolds(ctx); err != nil {
			return nil, err
		}
	}
	var err error
	resold := 0
	if out.stats, err = admin.stats(ctx); err != nil {
		return nil, fmt.Errorf("GET /api/stats: %w", err)
	}
	if out.orders, err = admin.orders(ctx); err != nil {
		return nil, fmt.Errorf("GET /api/orders: %w", err)
	}
	run := verdict.CartRun{Asked: strategy, HoldStrategy: holdStrategy(strategy), Items: itemsOf(out.stats), Orders: ordersOf(out.orders)}
	for _, c := range w.cartList {
		run.Carts = append(run.Carts, verdict.Cart{Key: c.Key, Lines: linesOf(c.Merged), Attempts: cartAnswers(c.Attempts), Replays: cartAnswers(c.Replays)})
	}
	for _, h := range w.holdList {
		if !h.placed() {
			continue
		}
		vh := verdict.Hold{ID: h.Place.Hold.ID, Lines: linesOf(h.Merged), ExpiresAt: h.Place.Hold.ExpiresAt,
			Confirms: cartAnswers(h.Confirms), Status: h.Final.Status, OrderID: h.Final.OrderID}
		for _, r := range h.Cancels {
			vh.Cancelled = vh.Cancelled || r.Status == 204
		}
		run.Holds = append(run.Holds, vh)
	}
	for _, s := range samples {
		run.Samples = append(run.Samples, itemsOf(s))
	}
	if w.cfg.Workload == WorkloadHolds {
		resaleStrategy := ""
		if strategy != "" {
			resaleStrategy = "guard"
		}
		var refused []string
		resold, refused = w.resale(ctx, out.stats, resaleStrategy)
		after, err := admin.stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("GET /api/stats after the resale: %w", err)
		}
		run.Resale = &verdict.Resale{Refused: refused, Items: itemsOf(after)}
	}
	out.findings = verdict.CheckCarts(run)
	out.figures = w.cartFigures(elapsed, lost)
	if run.Resale != nil {
		out.figures.Resold = resold
		for _, s := range out.stats {
			out.figures.HeldAtEnd += s.HeldUnits
		}
	}
	return out, nil
}

func linesOf(ls []cartLine) []verdict.Line {
	out := make([]verdict.Line, len(ls))
	for i, l := range ls {
		out[i] = verdict.Line{ItemID: l.ItemID, Quantity: l.Quantity}
	}
	return out
}

func receiptLines(ls []lineReceipt) []verdict.Line {
	if ls == nil {
		return nil
	}
	out := make([]verdict.Line, len(ls))
	for i, l := range ls {
		out[i] = verdict.Line{ItemID: l.ItemID, Quantity: l.Quantity, Remaining: l.Remaining, FenceToken: l.FenceToken}
	}
	return out
}

func cartAnswers(rs []cartResult) []verdict.Answer {
	if len(rs) == 0 {
		return nil
	}
	out := make([]verdict.Answer, len(rs))
	for i, r := range rs {
		out[i] = verdict.Answer{Status: r.Status, Code: r.Code, OrderID: r.Receipt.OrderID, Strategy: r.Receipt.Strategy,
			WorkMS: r.WorkMS, Lines: receiptLines(r.Receipt.Lines), Sent: r.Start}
	}
	return out
}

// heldItems returns the items some hold request named (answered or not).
func (w *workload) heldItems() map[int64]bool {
	out := map[int64]bool{}
	for _, h := range w.holdList {
		for _, l := range h.Merged {
			out[l.ItemID] = true
		}
	}
	return out
}

// cartHistory checks the history of a cart workload: every checkout projected on its items
// (sendCart). The items a hold touched are left out: a hold's cancel or expiry puts units back
// (an expiry at no response time of any request), and the stock model only goes down.
func (w *workload) cartHistory(ctx context.Context, cfg Config, items []item, viz func(int64) string) *HistoryResult {
	held := w.heldItems()
	if len(held) == 0 {
		return checkHistory(ctx, cfg, w.rec.Operations(), items, viz)
	}
	var ops []linearize.Operation
	for _, o := range w.rec.Operations() {
		if !held[o.Op.ItemID()] {
			ops = append(ops, o)
		}
	}
	var kept []item
	for _, it := range items {
		if !held[it.ID] {
			kept = append(kept, it)
		}
	}
	h := checkHistory(ctx, cfg, ops, kept, viz)
	left := make([]int64, 0, len(held))
	for id := range held {
		left = append(left, id)
	}
	slices.Sort(left)
	note := fmt.Sprintf("items %v left out: holds put units back (a cancel, an expiry that no request's answer times), which the stock model, whose stock only goes down, cannot order", left)
	if len(ops) == 0 {
		h.Verdict, h.Reason = histUnknown, "not checked: "+note
		return h
	}
	if h.Reason != "" {
		note = h.Reason + "; " + note
	}
	h.Reason = note
	return h
}

// cartPurchases projects the checkouts on the hot item for the pause's figures (settle): each
// attempt with the hot item's line of its receipt; and the orders, a cart's order with its
// hot line's token (the order rows of carts name no item).
func (w *workload) cartPurchases(orders []order) ([]*purchase, []order) {
	hot := w.items[0].ID
	byOrder := map[int64]int64{} // order -> token of its hot line
	var ps []*purchase
	for _, c := range w.cartList {
		p := &purchase{Key: c.Key, ItemID: hot, Instance: c.Instance}
		for _, r := range c.Attempts {
			pr := purchaseResult{Status: r.Status, Code: r.Code, Start: r.Start, Latency: r.Latency}
			for _, l := range r.Receipt.Lines {
				if l.ItemID == hot {
					pr.Receipt = receipt{OrderID: r.Receipt.OrderID, ItemID: hot, FenceToken: l.FenceToken, Remaining: l.Remaining}
					byOrder[r.Receipt.OrderID] = l.FenceToken
				}
			}
			p.Attempts = append(p.Attempts, pr)
		}
		ps = append(ps, p)
	}
	projected := make([]order, 0, len(orders))
	for _, o := range orders {
		if tok, ok := byOrder[o.OrderID]; ok {
			o.ItemID, o.FenceToken = hot, tok
		}
		projected = append(projected, o)
	}
	return ps, projected
}
