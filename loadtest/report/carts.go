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
			fmt.Fprintf(w, "\ncarts (-workload %s: 1-%d lines, repeated lines merged):\n", c.Workload, workload.MaxCartLines)
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
	if guard != nil && lockGuard != nil && guard.Carts.HotSoldPerSec > 0 && r.Config.Chaos == "" {
		g, l := guard.Carts, lockGuard.Carts
		fmt.Fprintf(w, "carts with the hot item: lock+guard / guard: sold/s %.2fx (%.0f against %.0f), answered/s %.2fx; per extra item %+.1fms against %+.1fms\n",
			l.HotSoldPerSec/g.HotSoldPerSec, l.HotSoldPerSec, g.HotSoldPerSec, l.HotPerSec/max(g.HotPerSec, 1e-9), l.PerExtraItemMS, g.PerExtraItemMS)
	}
}

// serverHolds says whether the servers keep one hold per key answered (no retry held twice).
func serverHolds(f verdict.Findings) string {
	if f.ServerHolds == 0 && f.HoldKeys > 0 {
		return fmt.Sprintf("%d keys answered with their hold, the servers' holds not counted", f.HoldKeys)
	}
	return fmt.Sprintf("%d keys answered with their hold, %d holds on the servers, %d held twice", f.HoldKeys, f.ServerHolds, f.DoubleHolds)
}
