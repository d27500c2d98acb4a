package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
)

// The verdicts on a strategy's checked history.
const (
	histLinearizable    = "linearizable"
	histNotLinearizable = "NOT linearizable"
	histUnknown         = "unknown"
)

// HistoryResult is the verdict on the history of one strategy's run: every purchase attempt
// (the -retry copies and the replays after a client timeout included) and every read of an
// item's stock, each with the instants it was sent and answered, checked for linearizability
// by internal/linearize against a stock counter with a conditional decrement.
type HistoryResult struct {
	Verdict    string        `json:"verdict"`    // linearizable, NOT linearizable or unknown
	Reason     string        `json:"reason"`     // why, for NOT linearizable and unknown
	Operations int           `json:"operations"` // operations recorded (attempts and reads)
	Reads      int           `json:"reads"`      // of those, reads of an item's stock
	CheckedMS  float64       `json:"checked_ms"` // time spent checking
	Items      []HistoryItem `json:"items"`
	Expected   bool          `json:"expected_linearizable"` // the strategy is expected SAFE in this setting
	Failed     bool          `json:"failed"`                // expected linearizable, found NOT linearizable
}

// HistoryItem is the verdict on one item's history.
type HistoryItem struct {
	ItemID        int64   `json:"item_id"`
	Result        string  `json:"result"` // ok, illegal or unknown (internal/linearize)
	Checked       int     `json:"checked"`
	Indeterminate int     `json:"indeterminate"` // of the checked, operations of unknown outcome
	Skipped       int     `json:"skipped"`       // refused purchases and unanswered reads
	ElapsedMS     float64 `json:"elapsed_ms"`
	Reason        string  `json:"reason,omitempty"`
	Visualization string  `json:"visualization,omitempty"` // Porcupine's page of the item's history, on a violation
}

// readNow draws whether the next operation of the workload is a read of an item's stock.
func (w *workload) readNow(rng *rand.Rand) bool {
	return w.rec != nil && w.cfg.Reads > 0 && rng.Float64() < w.cfg.Reads
}

// pickItem draws an item as purchases do: the hot one with probability -hot.
func (w *workload) pickItem(rng *rand.Rand) int64 {
	if len(w.items) > 1 && rng.Float64() >= w.cfg.Hot {
		return w.items[1+rng.IntN(len(w.items)-1)].ID
	}
	return w.items[0].ID
}

// buy sends one purchase attempt to a and records it in the history.
func (w *workload) buy(ctx context.Context, a *api, req purchaseReq) purchaseResult {
	return w.recorded(req, func() purchaseResult { return a.purchase(ctx, req) })
}

// recorded runs send, one purchase attempt of req, and records it in the history: invoked
// before send, answered after it.
func (w *workload) recorded(req purchaseReq, send func() purchaseResult) purchaseResult {
	if w.rec == nil {
		return send()
	}
	call := w.rec.Begin(linearize.Purchase{Item: req.ItemID, Quantity: req.Quantity, Key: req.Key})
	r := send()
	call.End(linearize.PurchaseOutcome(r.Status, r.Code, r.Receipt.Remaining))
	return r
}

// read asks a for the stock of item id (GET /api/items/:id) and records it in the history.
func (w *workload) read(ctx context.Context, a *api, id int64) {
	w.reads.Add(1)
	call := w.rec.Begin(linearize.Read{Item: id})
	var it item
	status, err := a.do(ctx, http.MethodGet, "/api/items/"+strconv.FormatInt(id, 10), nil, nil, &it)
	switch {
	case err == nil:
		call.End(linearize.Stock{Units: it.Stock})
	case isTimeout(err):
		call.Unknown("timeout")
	default:
		call.Unknown(fmt.Sprintf("%d %v", status, oneLine(err.Error())))
	}
}

// checkHistory checks ops, the history of one strategy's run on items (each of which started
// with cfg.Stock units), within cfg.CheckTimeout, and writes Porcupine's visualization of
// each item found NOT linearizable to vizPath(item).
func checkHistory(ctx context.Context, cfg Config, ops []linearize.Operation, items []item, vizPath func(int64) string) *HistoryResult {
	h := &HistoryResult{Operations: len(ops)}
	for _, o := range ops {
		if _, ok := o.Op.(linearize.Read); ok {
			h.Reads++
		}
	}
	if cfg.CheckTimeout <= 0 {
		h.Verdict, h.Reason = histUnknown, "not checked (-check-timeout 0)"
		return h
	}
	stock := make(map[int64]int, len(items))
	for _, it := range items {
		stock[it.ID] = cfg.Stock
	}
	if vizPath != nil {
		if p := vizPath(0); p != "" {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				vizPath = nil // the verdicts stand without the pages
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
	defer cancel()
	start := time.Now()
	res, err := linearize.Check(cctx, ops, linearize.Options{Stock: stock, Timeout: cfg.CheckTimeout, VisualizationPath: vizPath})
	h.CheckedMS = ms(time.Since(start))
	var reasons []string
	for _, r := range res {
		h.Items = append(h.Items, HistoryItem{ItemID: r.Item, Result: string(r.Result), Checked: r.Checked,
			Indeterminate: r.Indeterminate, Skipped: r.Skipped, ElapsedMS: ms(r.Elapsed), Reason: r.Reason, Visualization: r.Visualization})
		if r.Result != linearize.Ok {
			reasons = append(reasons, fmt.Sprintf("item %d: %s", r.Item, r.Reason))
		}
	}
	switch linearize.Overall(res) {
	case linearize.Ok:
		h.Verdict = histLinearizable
	case linearize.Illegal:
		h.Verdict = histNotLinearizable
	default:
		h.Verdict = histUnknown
	}
	if err != nil && res == nil {
		h.Verdict = histUnknown
		reasons = append(reasons, err.Error())
	} else if err != nil {
		reasons = append(reasons, err.Error())
	}
	h.Reason = strings.Join(reasons, "; ")
	return h
}

// vizPathFor returns where the visualization of an item's history found NOT linearizable is
// written: next to the -html report (else the -json report, else in the temporary directory),
// named after the report, the strategy and the item.
func vizPathFor(cfg Config, label string) func(int64) string {
	base := cfg.HTMLFile
	if base == "" {
		base = cfg.JSONFile
	}
	if base == "" {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("loadtest-%d.html", cfg.Seed))
	}
	stem := strings.TrimSuffix(base, filepath.Ext(base))
	safe := strings.NewReplacer("+", "_", "/", "_", " ", "_", "(", "", ")", "", "@", "").Replace(label)
	return func(id int64) string {
		return fmt.Sprintf("%s-history-%s-item-%d.html", stem, safe, id)
	}
}

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
		case h.Verdict == histNotLinearizable:
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
		if h.Verdict != histLinearizable && len(h.Items) == 0 && h.Reason != "" {
			fmt.Fprintf(w, "  %-*s   %s\n", width, "", h.Reason)
		}
	}
}

// defaultCheckTimeout is -check-timeout's default: the bound of one strategy's check.
const defaultCheckTimeout = 30 * time.Second
