package checks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// The verdicts on a strategy's checked history.
const (
	Linearizable    = "linearizable"
	NotLinearizable = "NOT linearizable"
	Unknown         = "unknown"
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

// History checks ops, the history of one strategy's run on items (each of which started
// with cfg.Stock units), within cfg.CheckTimeout, and writes Porcupine's visualization of
// each item found NOT linearizable to vizPath(item).
func History(ctx context.Context, cfg config.Config, ops []linearize.Operation, items []client.Item, vizPath func(int64) string) *HistoryResult {
	h := &HistoryResult{Operations: len(ops)}
	for _, o := range ops {
		if _, ok := o.Op.(linearize.Read); ok {
			h.Reads++
		}
	}
	if cfg.CheckTimeout <= 0 {
		h.Verdict, h.Reason = Unknown, "not checked (-check-timeout 0)"
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
	checked := 0
	for _, r := range res {
		checked += r.Checked
	}
	switch linearize.Overall(res) {
	case linearize.Ok:
		h.Verdict = Linearizable
		if checked == 0 {
			// Nothing of a known outcome was recorded: no history to call linearizable.
			h.Verdict = Unknown
			reasons = append(reasons, "nothing to check: no operation of the run was recorded with an outcome the model orders")
		}
	case linearize.Illegal:
		h.Verdict = NotLinearizable
	default:
		h.Verdict = Unknown
	}
	if err != nil && res == nil {
		h.Verdict = Unknown
		reasons = append(reasons, err.Error())
	} else if err != nil {
		reasons = append(reasons, err.Error())
	}
	h.Reason = strings.Join(reasons, "; ")
	return h
}

// VizPath returns where the visualization of an item's history found NOT linearizable is
// written: next to the -html report (else the -json report, else in the temporary directory),
// named after the report, the strategy and the item.
func VizPath(cfg config.Config, label string) func(int64) string {
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

// DefaultCheckTimeout is -check-timeout's default: the bound of one strategy's check.
const DefaultCheckTimeout = 30 * time.Second

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
