package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// writeCarts prints the figures of a cart or hold workload: per strategy the checkouts per
// second (those with the hot item apart), a sold checkout's latency by its distinct items and
// the cost of each extra item, the holds' fates and hold-then-confirm against a direct
// checkout; then lock+guard against guard on the carts with the hot item.
func (r *Report) writeCarts(w io.Writer) {
	header := false
	for i := range r.Strategies {
		s := &r.Strategies[i]
		c := s.Carts
		if c == nil {
			continue
		}
		if !header {
			header = true
			fmt.Fprintf(w, "\ncarts (-workload %s: 1-%d lines, repeated lines merged):\n", c.Workload, workload.MaxCartLines)
		}
		fmt.Fprintf(w, "  %-12s %d checkouts, %.0f/s answered, %.0f/s sold, p99 %s; with the hot item: %d, %.0f/s answered, %.0f/s sold\n",
			s.Label(), c.Checkouts, c.CheckoutsPerSec, c.SoldPerSec, fmtMS(c.P99MS), c.HotCheckouts, c.HotPerSec, c.HotSoldPerSec)
		if c.Singles > 0 {
			fmt.Fprintf(w, "  %-12s single purchases of the hot item among them: %d, %.0f/s sold (in none of the figures above)\n", "", c.Singles, c.SinglesSoldPerSec)
		}
		fmt.Fprintf(w, "  %-12s longest lock wait (Server-Timing; mean, answers): %s\n", "", lockWaitsText(c.LockWaits))
		if h := c.Coalesced; h != nil && h.Holds > 0 {
			fmt.Fprintf(w, "  %-12s coalesced holds: %d, %d of them served carts; mean carts per hold %.2f (per hold that served a cart %.2f; stockguard_hold_carts)\n",
				"", h.Holds, h.CartHolds, h.CartsPerHold, h.CartsPerCartHold)
		}
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
		if c.Workload == config.WorkloadHolds {
			fmt.Fprintf(w, "  %-12s holds: %d asked, %d placed (%d short): %d confirmed, %d cancelled, %d left to expire (%d confirmed late, refused hold_expired)\n",
				"", c.Holds, c.Placed, c.Short, c.Confirmed, c.Cancelled, c.Expired, c.LateRefused)
			fmt.Fprintf(w, "  %-12s hold keys: %d placements sent twice under their key, %d answers 200 (the key's hold); %d without answer, %d of them answered by their replay; %s\n",
				"", c.Retried, c.KeyReplays, c.Lost, c.Recovered, serverHolds(s.Findings))
			fmt.Fprintf(w, "  %-12s once every hold had expired: %d units still counted held (not given back yet), %d units bought back (initial − sold)\n",
				"", c.HeldAtEnd, c.Resold)
			if c.HoldThenMS > 0 && c.CheckoutMeanMS > 0 {
				fmt.Fprintf(w, "  %-12s hold then confirm: %s (hold %s, the client's work, confirm %s) against a direct checkout %s: %.2fx\n",
					"", fmtMS(c.HoldThenMS), fmtMS(c.PlaceMeanMS), fmtMS(c.ConfirmMeanMS), fmtMS(c.CheckoutMeanMS), c.HoldThenMS/c.CheckoutMeanMS)
			}
		}
	}
	if r.Config.Chaos != "" {
		return
	}
	routes := r.Config.Routes
	if len(routes) == 0 {
		routes = []string{config.RouteRoundRobin}
	}
	for _, route := range routes {
		guard, lockGuard := r.cartPair(route)
		if guard == nil || lockGuard == nil || guard.Carts.HotSoldPerSec == 0 {
			continue
		}
		g, l := guard.Carts, lockGuard.Carts
		fmt.Fprintf(w, "carts with the hot item, route %s: lock+guard / guard: sold/s %.2fx (%.0f against %.0f), answered/s %.2fx, p99 %.2fx; per extra item %+.1fms against %+.1fms\n",
			route, l.HotSoldPerSec/g.HotSoldPerSec, l.HotSoldPerSec, g.HotSoldPerSec, l.HotPerSec/max(g.HotPerSec, 1e-9),
			l.P99MS/max(g.P99MS, 1e-9), l.PerExtraItemMS, g.PerExtraItemMS)
	}
}

// cartPair returns the cart runs of guard and lock+guard routed by route (nil when absent).
func (r *Report) cartPair(route string) (guard, lockGuard *StrategyResult) {
	for i := range r.Strategies {
		s := &r.Strategies[i]
		if s.Carts == nil || s.Fault != "" || (s.Route != route && (s.Route != "" || route != config.RouteRoundRobin)) {
			continue
		}
		switch s.Strategy {
		case "guard":
			guard = s
		case "lock+guard":
			lockGuard = s
		}
	}
	return guard, lockGuard
}

// lockWaitsText tells the longest lock wait of each class with answers.
func lockWaitsText(ws []workload.LockWait) string {
	var parts []string
	for _, lw := range ws {
		if lw.Answers == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s, %d)", lockClassLabel[lw.Class], fmtMS(lw.MaxMS), fmtMS(lw.MeanMS), lw.Answers))
	}
	if len(parts) == 0 {
		return "none answered"
	}
	return strings.Join(parts, "; ")
}

// lockClassLabel names the lock-wait classes (workload.LockClasses) in the report.
var lockClassLabel = map[string]string{
	workload.ClassSingle:   "single purchases",
	workload.ClassHot:      "carts of the hot item only",
	workload.ClassHotOther: "carts of the hot item and others",
	workload.ClassCold:     "carts of cold items only",
}

// cartRow is one strategy's row of the HTML report's carts table.
type cartRow struct {
	Label             string
	Checkouts         int
	SoldPerSec, P99MS float64
	SinglesSoldPerSec float64
	Waits             []string // the longest lock wait of each class (workload.LockClasses)
	CartsPerHold      string
}

// cartRows are the rows of the carts table (none without a cart workload).
func (r *Report) cartRows() []cartRow {
	var rows []cartRow
	for i := range r.Strategies {
		s := &r.Strategies[i]
		c := s.Carts
		if c == nil {
			continue
		}
		row := cartRow{Label: s.Label(), Checkouts: c.Checkouts, SoldPerSec: c.SoldPerSec, P99MS: c.P99MS, SinglesSoldPerSec: c.SinglesSoldPerSec, CartsPerHold: "–"}
		for _, class := range workload.LockClasses {
			cell := "–"
			for _, lw := range c.LockWaits {
				if lw.Class == class && lw.Answers > 0 {
					cell = fmt.Sprintf("%s (%s, %d)", fmtMS(lw.MaxMS), fmtMS(lw.MeanMS), lw.Answers)
				}
			}
			row.Waits = append(row.Waits, cell)
		}
		if h := c.Coalesced; h != nil && h.Holds > 0 {
			row.CartsPerHold = fmt.Sprintf("%.2f (%d holds)", h.CartsPerHold, h.Holds)
		}
		rows = append(rows, row)
	}
	return rows
}

// cartClassLabels names the lock-wait classes in report order.
func cartClassLabels() []string {
	out := make([]string, len(workload.LockClasses))
	for i, c := range workload.LockClasses {
		out[i] = lockClassLabel[c]
	}
	return out
}

// serverHolds says whether the servers keep one hold per key answered (no retry held twice).
func serverHolds(f verdict.Findings) string {
	if f.ServerHolds == 0 && f.HoldKeys > 0 {
		return fmt.Sprintf("%d keys answered with their hold, the servers' holds not counted", f.HoldKeys)
	}
	return fmt.Sprintf("%d keys answered with their hold, %d holds on the servers, %d held twice", f.HoldKeys, f.ServerHolds, f.DoubleHolds)
}
