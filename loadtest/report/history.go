package report

import (
	"fmt"
	"io"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/checks"
)

// writeHistory prints one line per strategy on its checked history, and the reason of every
// verdict other than linearizable.
func (r *Report) writeHistory(w io.Writer) {
	checked := false
	for _, s := range r.Strategies {
		checked = checked || s.History != nil
	}
	if !checked {
		return
	}
	width := 14
	for _, s := range r.Strategies {
		width = max(width, len(s.Label()))
	}
	fmt.Fprintln(w, "\nchecked history (linearizability of every answer, per item):")
	for _, s := range r.Strategies {
		h := s.History
		if h == nil {
			continue
		}
		shown := h.Verdict
		switch {
		case h.Failed:
			shown += " (FAIL: called safe)"
		case h.Verdict == checks.NotLinearizable:
			shown += " (expected)"
		}
		fmt.Fprintf(w, "  %-*s %s: %d operations (%d reads), checked in %s\n", width, s.Label(), shown, h.Operations, h.Reads, fmtMS(h.CheckedMS))
		shownItems := 0
		for _, it := range h.Items {
			if it.Result == string(linearize.Ok) {
				continue
			}
			if shownItems++; shownItems > 3 {
				fmt.Fprintf(w, "  %-*s   ... and more items (see the JSON report)\n", width, "")
				break
			}
			fmt.Fprintf(w, "  %-*s   item %d (%s): %s\n", width, "", it.ItemID, it.Result, it.Reason)
			if it.Visualization != "" {
				fmt.Fprintf(w, "  %-*s     visualization: %s\n", width, "", it.Visualization)
			}
		}
		if note := historyNote(h); note != "" {
			fmt.Fprintf(w, "  %-*s   %s\n", width, "", note)
		}
	}
}

// historyNote is what a history's report says besides its items' lines: its reason (why it
// was not checked, or what it left out, as the holds workload's items that holds touch), unless
// an item line that is not ok shows it already.
func historyNote(h *checks.HistoryResult) string {
	for _, it := range h.Items {
		if it.Result != string(linearize.Ok) {
			return ""
		}
	}
	return h.Reason
}
