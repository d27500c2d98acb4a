package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/verdict"
)

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
