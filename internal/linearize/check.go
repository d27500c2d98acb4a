package linearize

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the verdict on one item's history.
type Result string

// The verdicts.
const (
	Ok      Result = "ok"      // linearizable: some order of the operations explains every answer
	Illegal Result = "illegal" // not linearizable: no order does
	Unknown Result = "unknown" // the checker ran out of time (or was not run) before deciding
)

// DefaultTimeout is the time Check gives one item when Options.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Options are Check's inputs beside the history.
type Options struct {
	// Stock is each item's stock before the first operation. An item of the history that is
	// missing here is an error. The model's stock only goes down: a history spans no
	// restock and no catalogue reset (record each run with its own Recorder).
	Stock map[int64]int
	// Timeout bounds the search for one item (0: DefaultTimeout); an item not decided in
	// time is Unknown. The context's deadline, if sooner, bounds it too.
	Timeout time.Duration
	// VisualizationPath returns the file to which an Illegal item's visualization (one HTML
	// page, porcupine's: the history, the longest partial linearizations and the point where
	// each fails) is written. Nil, or "" for an item, writes none.
	VisualizationPath func(item int64) string
}

// ItemResult is the verdict on one item, with what it was drawn from.
type ItemResult struct {
	Item          int64
	Result        Result
	Checked       int           // operations checked (the attempts sharing a key count once)
	Indeterminate int           // of those, operations whose outcome is unknown
	Skipped       int           // refused purchases and unanswered reads: they promise nothing
	Elapsed       time.Duration // time spent checking
	Reason        string        // why, for Illegal and Unknown
	Visualization string        // the visualization written, for Illegal ("" if none)
}

// Overall returns the verdict on a whole history from its items': Illegal if any item is,
// else Unknown if any item is, else Ok.
func Overall(items []ItemResult) Result {
	res := Ok
	for _, it := range items {
		switch it.Result {
		case Illegal:
			return Illegal
		case Unknown:
			res = Unknown
		}
	}
	return res
}

// Check checks the recorded history: Check(ctx, r.Operations(), opts).
func (r *Recorder) Check(ctx context.Context, opts Options) ([]ItemResult, error) {
	return Check(ctx, r.Operations(), opts)
}

// Check checks each item's history for linearizability against the stock model (see the
// package documentation), one item after the other, in item order. Items not reached before
// ctx is done are Unknown. The error reports an item without initial stock (and then nothing
// is checked) or a visualization that could not be written (the results stand).
func Check(ctx context.Context, ops []Operation, opts Options) ([]ItemResult, error) {
	byItem := map[int64][]Operation{}
	for _, o := range ops {
		id := o.Op.ItemID()
		if _, ok := opts.Stock[id]; !ok {
			return nil, fmt.Errorf("linearize: item %d has operations but no initial stock", id)
		}
		byItem[id] = append(byItem[id], o)
	}
	items := make([]int64, 0, len(byItem))
	for id := range byItem {
		items = append(items, id)
	}
	slices.Sort(items)
	var out []ItemResult
	var errs []error
	for _, id := range items {
		res, err := checkItem(ctx, id, byItem[id], opts)
		out = append(out, res)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// checkItem checks one item's operations.
func checkItem(ctx context.Context, item int64, ops []Operation, opts Options) (ItemResult, error) {
	res := ItemResult{Item: item}
	hist, skipped, conflict := prepare(ops)
	res.Checked, res.Skipped = len(hist), skipped
	for _, h := range hist {
		if _, ok := h.Output.(Indeterminate); ok {
			res.Indeterminate++
		}
	}
	if conflict != "" {
		res.Result, res.Reason = Illegal, conflict
		return res, nil
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	if ctx.Err() != nil || timeout <= 0 {
		res.Result, res.Reason = Unknown, "not checked: "+cmp.Or(context.Cause(ctx), context.DeadlineExceeded).Error()
		return res, nil
	}
	canonicalize(hist)
	model := stockModel(opts.Stock[item], landmarksOf(hist))
	start := time.Now()
	verdict, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
	res.Elapsed = time.Since(start)
	switch verdict {
	case porcupine.Ok:
		res.Result = Ok
	case porcupine.Unknown:
		res.Result, res.Reason = Unknown, fmt.Sprintf("undecided after %v", timeout.Round(time.Millisecond))
	default:
		res.Result = Illegal
		res.Reason = fmt.Sprintf("no order of the %d operations explains every answer; the longest partial order places %d",
			len(hist), longestPrefix(info))
		if opts.VisualizationPath == nil {
			return res, nil
		}
		if path := opts.VisualizationPath(item); path != "" {
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				return res, fmt.Errorf("linearize: item %d: visualization: %w", item, err)
			}
			res.Visualization = path
		}
	}
	return res, nil
}

// longestPrefix returns the length of the longest partial linearization porcupine found.
func longestPrefix(info porcupine.LinearizationInfo) int {
	n := 0
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			n = max(n, len(l))
		}
	}
	return n
}
