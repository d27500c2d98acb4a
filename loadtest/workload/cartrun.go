package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// cartStep runs operation n of a cart workload on instance: a checkout, or under -workload
// holds a hold (a checkout with probability holdsDirect).
func (w *Workload) cartStep(ctx context.Context, rng *rand.Rand, n, instance int) {
	if w.cfg.Workload == config.WorkloadHolds && rng.Float64() >= holdsDirect {
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

// Sampler reads GET /api/stats at its start, every sampleEvery, and once more when stopped
// (so that a run shorter than sampleEvery is sampled too): each answer is one consistent
// snapshot of every item (one statement), in which sold + held ≤ initial and initial − stock =
// sold + held must hold at every instant, not only at the end.
type Sampler struct {
	ctx     context.Context
	api     *client.API
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples [][]client.ItemStats
}

// StartSampler starts sampling a's stats; Stop stops it and returns the samples.
func StartSampler(ctx context.Context, a *client.API) *Sampler {
	s := &Sampler{ctx: ctx, api: a, stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // owner: the strategy's run, which calls Stop
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// sample reads the stats once; an instance paused (-chaos pause) answers late: skipped.
func (s *Sampler) sample() {
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	defer cancel()
	if st, err := s.api.Stats(ctx); err == nil {
		s.mu.Lock()
		s.samples = append(s.samples, st)
		s.mu.Unlock()
	}
}

// Stop stops the sampling, takes a last sample and returns them all.
func (s *Sampler) Stop() [][]client.ItemStats {
	close(s.stop)
	<-s.done
	if s.ctx.Err() == nil {
		s.sample()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// CartOutcome is what a cart workload's run ends with.
type CartOutcome struct {
	Stats               []client.ItemStats
	Orders              []client.Order
	Findings            verdict.Findings
	Replays, Unresolved int
	Figures             *CartFigures
}

// FinishCarts settles a cart workload's run: it replays the checkouts (and hold placements,
// confirmations, cancellations) of unknown outcome under their keys; under -workload holds
// waits until every hold has expired, confirms half of those left to expire (each must be
// refused) and counts the holds the servers keep (one per key: no retry held twice); reads
// the items and the orders; under -workload holds buys back what every item should have left (the expired
// holds' units must be sellable); and checks every invariant (verdict.CheckCarts).
func (w *Workload) FinishCarts(ctx context.Context, admin *client.API, strategy string, samples [][]client.ItemStats, elapsed time.Duration) (*CartOutcome, error) {
	out := &CartOutcome{}
	out.Replays, out.Unresolved = w.reconcileCarts(ctx)
	var lost int
	var server *verdict.ServerHolds
	var err error
	if w.cfg.Workload == config.WorkloadHolds {
		r, u, l := w.reconcileHolds(ctx)
		out.Replays, out.Unresolved, lost = out.Replays+r, out.Unresolved+u, l
		if err := w.expireHolds(ctx); err != nil {
			return nil, err
		}
		if server, err = w.serverHolds(ctx); err != nil {
			return nil, err
		}
	}
	resold := 0
	if out.Stats, err = admin.Stats(ctx); err != nil {
		return nil, fmt.Errorf("GET /api/stats: %w", err)
	}
	if out.Orders, err = admin.Orders(ctx); err != nil {
		return nil, fmt.Errorf("GET /api/orders: %w", err)
	}
	run := verdict.CartRun{Asked: strategy, HoldStrategy: holdStrategy(strategy), Items: checks.ItemsOf(out.Stats), Orders: checks.OrdersOf(out.Orders)}
	for _, c := range w.cartList {
		run.Carts = append(run.Carts, verdict.Cart{Key: c.Key, Lines: checks.LinesOf(c.Merged), Attempts: checks.CartAnswers(c.Attempts), Replays: checks.CartAnswers(c.Replays)})
	}
	for _, h := range w.holdList {
		if !h.placed() {
			continue
		}
		vh := verdict.Hold{ID: h.Place.Hold.ID, Lines: checks.LinesOf(h.Merged), ExpiresAt: h.Place.Hold.ExpiresAt,
			Confirms: checks.CartAnswers(h.Confirms), Status: h.Final.Status, OrderID: h.Final.OrderID}
		for _, r := range h.Cancels {
			vh.Cancelled = vh.Cancelled || r.Status == 204
		}
		run.Holds = append(run.Holds, vh)
	}
	for _, s := range samples {
		run.Samples = append(run.Samples, checks.ItemsOf(s))
	}
	if w.cfg.Workload == config.WorkloadHolds {
		run.HoldKeys, run.ServerHolds = w.holdKeys(), server
		resaleStrategy := ""
		if strategy != "" {
			resaleStrategy = "guard"
		}
		var refused []string
		resold, refused = w.resale(ctx, out.Stats, resaleStrategy)
		after, err := admin.Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("GET /api/stats after the resale: %w", err)
		}
		run.Resale = &verdict.Resale{Refused: refused, Items: checks.ItemsOf(after)}
	}
	out.Findings = verdict.CheckCarts(run)
	out.Figures = w.cartFigures(elapsed, lost)
	if run.Resale != nil {
		out.Figures.Resold = resold
		for _, s := range out.Stats {
			out.Figures.HeldAtEnd += s.HeldUnits
		}
	}
	return out, nil
}

// heldItems returns the items some hold request named (answered or not).
func (w *Workload) heldItems() map[int64]bool {
	out := map[int64]bool{}
	for _, h := range w.holdList {
		for _, l := range h.Merged {
			out[l.ItemID] = true
		}
	}
	return out
}

// CartHistory checks the history of a cart workload: every checkout projected on its items
// (sendCart). The items a hold touched are left out: a hold's cancel or expiry puts units back
// (an expiry at no response time of any request), and the stock model only goes down.
func (w *Workload) CartHistory(ctx context.Context, cfg config.Config, items []client.Item, viz func(int64) string) *checks.HistoryResult {
	held := w.heldItems()
	if len(held) == 0 {
		return checks.History(ctx, cfg, w.rec.Operations(), items, viz)
	}
	var ops []linearize.Operation
	for _, o := range w.rec.Operations() {
		if !held[o.Op.ItemID()] {
			ops = append(ops, o)
		}
	}
	var kept []client.Item
	for _, it := range items {
		if !held[it.ID] {
			kept = append(kept, it)
		}
	}
	h := checks.History(ctx, cfg, ops, kept, viz)
	left := make([]int64, 0, len(held))
	for id := range held {
		left = append(left, id)
	}
	slices.Sort(left)
	note := fmt.Sprintf("items %v left out: holds put units back (a cancel, an expiry that no request's answer times), which the stock model, whose stock only goes down, cannot order", left)
	if len(ops) == 0 {
		h.Verdict, h.Reason = checks.Unknown, "not checked: "+note
		return h
	}
	if h.Reason != "" {
		note = h.Reason + "; " + note
	}
	h.Reason = note
	return h
}

// CartPurchases projects the checkouts on the hot item for the pause's figures (settle): each
// attempt with the hot item's line of its receipt; and the orders, a cart's order with its
// hot line's token (the order rows of carts name no item).
func (w *Workload) CartPurchases(orders []client.Order) ([]*client.Purchase, []client.Order) {
	hot := w.items[0].ID
	byOrder := map[int64]int64{} // order -> token of its hot line
	var ps []*client.Purchase
	for _, c := range w.cartList {
		p := &client.Purchase{Key: c.Key, ItemID: hot, Instance: c.Instance}
		for _, r := range c.Attempts {
			pr := client.PurchaseResult{Status: r.Status, Code: r.Code, Start: r.Start, Latency: r.Latency}
			for _, l := range r.Receipt.Lines {
				if l.ItemID == hot {
					pr.Receipt = client.Receipt{OrderID: r.Receipt.OrderID, ItemID: hot, FenceToken: l.FenceToken, Remaining: l.Remaining}
					byOrder[r.Receipt.OrderID] = l.FenceToken
				}
			}
			p.Attempts = append(p.Attempts, pr)
		}
		ps = append(ps, p)
	}
	projected := make([]client.Order, 0, len(orders))
	for _, o := range orders {
		if tok, ok := byOrder[o.OrderID]; ok {
			o.ItemID, o.FenceToken = hot, tok
		}
		projected = append(projected, o)
	}
	return ps, projected
}
