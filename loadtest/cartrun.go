package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
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

// CartFigures are the measurements of a cart or hold workload's run.
type CartFigures struct {
	Workload        string  `json:"workload"`
	Checkouts       int     `json:"checkouts"`         // checkouts (keys)
	CheckoutsPerSec float64 `json:"checkouts_per_s"`   // checkouts answered per second (any answer)
	SoldPerSec      float64 `json:"sold_per_s"`        // checkouts answered 201 per second
	HotCheckouts    int     `json:"hot_checkouts"`     // checkouts with a line of the hot item
	HotSoldPerSec   float64 `json:"hot_sold_per_s"`    // of them, answered 201 per second
	HotPerSec       float64 `json:"hot_per_s"`         // of them, answered per second
	BySize          []Size  `json:"by_size"`           // sold checkouts by their distinct items
	PerExtraItemMS  float64 `json:"per_extra_item_ms"` // least-squares slope of a sold checkout's mean latency per distinct item
	MultiItem       int     `json:"multi_item"`        // checkouts sold and holds placed with several distinct items
	// -workload holds
	Holds          int     `json:"holds,omitempty"`           // holds asked for
	Placed         int     `json:"placed,omitempty"`          // answered 201
	Short          int     `json:"short,omitempty"`           // refused for want of stock
	Lost           int     `json:"lost,omitempty"`            // placements without answer (they expire by themselves)
	Confirmed      int     `json:"confirmed,omitempty"`       // confirmed (201) in time
	Cancelled      int     `json:"cancelled,omitempty"`       // cancelled (204)
	Expired        int     `json:"expired,omitempty"`         // left to expire
	LateRefused    int     `json:"late_refused,omitempty"`    // confirmed after their expiry and refused hold_expired
	PlaceMeanMS    float64 `json:"place_mean_ms,omitempty"`   // a hold answered 201
	ConfirmMeanMS  float64 `json:"confirm_mean_ms,omitempty"` // a confirmation answered 201
	HoldThenMS     float64 `json:"hold_then_confirm_ms,omitempty"`
	CheckoutMeanMS float64 `json:"checkout_mean_ms,omitempty"` // a direct checkout answered 201
	HeldAtEnd      int     `json:"held_at_end,omitempty"`      // units of holds past their expiry that no sale had given back yet
	Resold         int     `json:"resold,omitempty"`           // units bought back once every hold had expired
}

// Size is the sold checkouts of one number of distinct items.
type Size struct {
	Items  int     `json:"items"`
	Sold   int     `json:"sold"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
}

// cartFigures measures the run from the client's record.
func (w *workload) cartFigures(elapsed time.Duration, lost int) *CartFigures {
	secs := max(elapsed.Seconds(), 1e-3)
	f := &CartFigures{Workload: w.cfg.Workload, Checkouts: len(w.cartList), Lost: lost}
	bySize := map[int][]float64{}
	var direct []float64
	for _, c := range w.cartList {
		for _, r := range c.Attempts {
			answered := r.Status != 0
			sold := r.Status == 201
			f.CheckoutsPerSec += b2f(answered)
			f.SoldPerSec += b2f(sold)
			if c.Hot {
				f.HotPerSec += b2f(answered)
				f.HotSoldPerSec += b2f(sold)
			}
			if sold && len(c.Merged) > 1 {
				f.MultiItem++
			}
			if sold {
				ms := float64(r.Latency) / float64(time.Millisecond)
				bySize[len(c.Merged)] = append(bySize[len(c.Merged)], ms)
				direct = append(direct, ms)
			}
		}
		if c.Hot {
			f.HotCheckouts++
		}
	}
	f.CheckoutsPerSec /= secs
	f.SoldPerSec /= secs
	f.HotPerSec /= secs
	f.HotSoldPerSec /= secs
	var xs, ys []float64
	for n := 1; n <= maxCartLines; n++ {
		ls := bySize[n]
		if len(ls) == 0 {
			continue
		}
		sz := Size{Items: n, Sold: len(ls), MeanMS: mean(ls), P50MS: median(ls)}
		f.BySize = append(f.BySize, sz)
		xs, ys = append(xs, float64(n)), append(ys, sz.MeanMS)
	}
	f.PerExtraItemMS = slope(xs, ys)
	if w.cfg.Workload != WorkloadHolds {
		return f
	}
	f.CheckoutMeanMS = mean(direct)
	var place, confirm, both []float64
	for _, h := range w.holdList {
		f.Holds++
		switch {
		case h.placed():
			f.Placed++
			place = append(place, ms(h.Place.Latency))
			if len(h.Merged) > 1 {
				f.MultiItem++
			}
		case h.Place.Code == "insufficient_stock":
			f.Short++
		}
		if !h.placed() {
			continue
		}
		switch {
		case h.Fate == fateExpire:
			f.Expired++
			if h.Late && len(h.Confirms) > 0 && h.Confirms[len(h.Confirms)-1].Code == "hold_expired" {
				f.LateRefused++
			}
		case h.Fate == fateCancel && len(h.Cancels) > 0 && h.Cancels[0].Status == 204:
			f.Cancelled++
		case h.Fate == fateConfirm && len(h.Confirms) > 0 && h.Confirms[0].Status == 201:
			f.Confirmed++
			confirm = append(confirm, ms(h.Confirms[0].Latency))
			both = append(both, ms(h.Place.Latency+h.Paid+h.Confirms[0].Latency))
		}
	}
	f.PlaceMeanMS, f.ConfirmMeanMS, f.HoldThenMS = mean(place), mean(confirm), mean(both)
	return f
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// slope is the least-squares slope of ys against xs (0 with fewer than two points).
func slope(xs, ys []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	mx, my := mean(xs), mean(ys)
	num, den := 0.0, 0.0
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
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

// writeCarts prints the figures of a cart or hold workload: per strategy the checkouts per
// second (those with the hot item apart), a sold checkout's latency by its distinct items and
// the cost of each extra item, the holds' fates and hold-then-confirm against a direct
// checkout; then lock+guard against guard on the carts with the hot item.
func (r *Report) writeCarts(w io.Writer) {
	var guard, lockGuard *StrategyResult
	header := false
	for i := range r.Strategies {
		s := &r.Strategies[i]
		c := s.Carts
		if c == nil {
			continue
		}
		if !header {
			header = true
			fmt.Fprintf(w, "\ncarts (-workload %s: 1-%d lines, repeated lines merged):\n", c.Workload, maxCartLines)
		}
		switch s.Strategy {
		case "guard":
			guard = s
		case "lock+guard":
			lockGuard = s
		}
		fmt.Fprintf(w, "  %-12s %d checkouts, %.0f/s answered, %.0f/s sold; with the hot item: %d, %.0f/s answered, %.0f/s sold\n",
			s.Label(), c.Checkouts, c.CheckoutsPerSec, c.SoldPerSec, c.HotCheckouts, c.HotPerSec, c.HotSoldPerSec)
		if len(c.BySize) > 0 {
			parts := make([]string, len(c.BySize))
			for i, sz := range c.BySize {
				parts[i] = fmt.Sprintf("%d: %s (p50 %s, %d)", sz.Items, fmtMS(sz.MeanMS), fmtMS(sz.P50MS), sz.Sold)
			}
			fmt.Fprintf(w, "  %-12s mean latency of a sold checkout by distinct items: %s; %+.1fms per extra item\n",
				"", strings.Join(parts, ", "), c.PerExtraItemMS)
		}
		if s.Verdict != verdict.Safe && !s.Failed { // a failed one's violations are printed below the table
			for i, v := range s.Violations {
				if i == 3 {
					fmt.Fprintf(w, "  %-12s ... %d more (see the JSON report)\n", "", len(s.Violations)-3)
					break
				}
				fmt.Fprintf(w, "  %-12s %s\n", "", v)
			}
		}
		if ev := s.Chaos; ev != nil && ev.Paused && ev.Token > 0 {
			wrote := ev.HolderWrote
			if wrote == "nothing" {
				wrote += " (its cart was refused by the fence of one of its items, or the holder saw the loss first: the client cannot tell which)"
			}
			fmt.Fprintf(w, "  %-12s paused holder of %s token %d: that token wrote %s; fence regressions on any item: %d\n",
				"", ev.LockKey, ev.Token, wrote, s.FenceRegressions)
		}
		if c.Workload == WorkloadHolds {
			fmt.Fprintf(w, "  %-12s holds: %d asked, %d placed (%d short, %d without answer): %d confirmed, %d cancelled, %d left to expire (%d confirmed late, refused hold_expired)\n",
				"", c.Holds, c.Placed, c.Short, c.Lost, c.Confirmed, c.Cancelled, c.Expired, c.LateRefused)
			fmt.Fprintf(w, "  %-12s once every hold had expired: %d units still counted held (not given back yet), %d units bought back (initial − sold)\n",
				"", c.HeldAtEnd, c.Resold)
			if c.HoldThenMS > 0 && c.CheckoutMeanMS > 0 {
				fmt.Fprintf(w, "  %-12s hold then confirm: %s (hold %s, the client's work, confirm %s) against a direct checkout %s: %.2fx\n",
					"", fmtMS(c.HoldThenMS), fmtMS(c.PlaceMeanMS), fmtMS(c.ConfirmMeanMS), fmtMS(c.CheckoutMeanMS), c.HoldThenMS/c.CheckoutMeanMS)
			}
		}
	}
	if guard != nil && lockGuard != nil && guard.Carts.HotSoldPerSec > 0 && r.Config.Chaos == "" {
		g, l := guard.Carts, lockGuard.Carts
		fmt.Fprintf(w, "carts with the hot item: lock+guard / guard: sold/s %.2fx (%.0f against %.0f), answered/s %.2fx; per extra item %+.1fms against %+.1fms\n",
			l.HotSoldPerSec/g.HotSoldPerSec, l.HotSoldPerSec, g.HotSoldPerSec, l.HotPerSec/max(g.HotPerSec, 1e-9), l.PerExtraItemMS, g.PerExtraItemMS)
	}
}
