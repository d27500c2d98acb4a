package linearize

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// prepare turns one item's operations into porcupine's: attempts sharing an Idempotency-Key
// become one operation, operations that promise nothing are left out (skipped counts them),
// an operation without a known outcome returns after every other one, and each operation
// gets a client lane of its own time (porcupine draws one row per client). conflict is not
// empty when attempts of one key were told different receipts.
func prepare(ops []Operation) (hist []porcupine.Operation, skipped int, conflict string) {
	type group struct {
		in        input
		call, ret time.Duration
		out       Outcome // nil while the outcome is unknown
		causes    []string
	}
	var groups []*group
	byKey := map[string]*group{}
	var conflicts []string
	var last time.Duration
	for _, o := range ops {
		out := o.Outcome
		if !o.Ended || out == nil {
			out = Indeterminate{Cause: "no answer"}
		}
		last = max(last, o.Call)
		if o.Ended {
			last = max(last, o.Return)
		}
		_, refused := out.(Refused)
		unknown, isUnknown := out.(Indeterminate)
		_, isSold := out.(Sold)
		if _, read := o.Op.(Read); refused || (read && isUnknown) {
			skipped++
			continue
		}
		p, isPurchase := o.Op.(Purchase)
		if !isPurchase || p.Key == "" || !(isUnknown || isSold) {
			g := &group{in: input{op: o.Op, attempts: 1}, call: o.Call, ret: o.Return, out: out}
			if isUnknown {
				g.out, g.causes = nil, []string{unknown.Cause}
			}
			groups = append(groups, g)
			continue
		}
		// One order at most per key: its write fell after the first of these attempts was
		// sent and before the first receipt came back.
		k := fmt.Sprintf("%d/%s", p.Quantity, p.Key)
		g := byKey[k]
		if g == nil {
			g = &group{in: input{op: p, key: p.Key}, call: o.Call}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.in.attempts++
		g.call = min(g.call, o.Call)
		if isUnknown {
			g.causes = append(g.causes, unknown.Cause)
			continue
		}
		sold := out.(Sold)
		switch prev, had := g.out.(Sold); {
		case !had:
			g.out, g.ret = sold, o.Return
		case prev.Remaining != sold.Remaining:
			conflicts = append(conflicts, fmt.Sprintf("the attempts of key %q were answered remaining %d and %d",
				p.Key, prev.Remaining, sold.Remaining))
		default:
			g.ret = min(g.ret, o.Return)
		}
	}
	for _, g := range groups {
		op := porcupine.Operation{Input: g.in, Output: g.out, Call: int64(g.call), Return: int64(g.ret),
			Metadata: metadata(g.in, g.causes)}
		if g.out == nil {
			op.Output = Indeterminate{Cause: strings.Join(g.causes, ", ")}
			op.Return = int64(last) + 1
		}
		hist = append(hist, op)
	}
	assignLanes(hist)
	return hist, skipped, strings.Join(conflicts, "; ")
}

// metadata describes what the visualization shows beside an operation: its key, its
// attempts, why its outcome is unknown.
func metadata(in input, causes []string) string {
	var parts []string
	if in.key != "" {
		parts = append(parts, fmt.Sprintf("key %s", in.key))
	}
	if in.attempts > 1 {
		parts = append(parts, fmt.Sprintf("%d attempts", in.attempts))
	}
	if len(causes) > 0 {
		parts = append(parts, "unknown: "+strings.Join(causes, ", "))
	}
	return strings.Join(parts, "; ")
}

// canonicalize readies the history for the search without changing its verdict (see state
// in model.go): it numbers, in the order they were sent, the purchases of unknown outcome of
// each quantity and the reads of each value; and it moves the call of each refusal for want
// of stock (sold out, insufficient) to its return. Such a refusal changes nothing and, the
// stock never going up, stays true once it is: an order that places it earlier can place it
// at its return instead, and the search no longer tries every subset of the refusals in
// flight.
func canonicalize(hist []porcupine.Operation) {
	order := make([]int, len(hist))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(hist[a].Call, hist[b].Call) })
	type class struct {
		read  bool
		value int // the quantity of a purchase, the stock a read returned
	}
	next := map[class]int{}
	for _, i := range order {
		in := hist[i].Input.(input)
		var c class
		switch out := hist[i].Output.(type) {
		case Indeterminate:
			p, ok := in.op.(Purchase)
			if !ok {
				continue
			}
			c = class{value: p.Quantity}
		case Stock:
			c = class{read: true, value: out.Units}
		default:
			continue
		}
		in.rank = next[c]
		next[c]++
		hist[i].Input = in
	}
	for i := range hist {
		switch hist[i].Output.(type) {
		case SoldOut, Insufficient:
			hist[i].Call = hist[i].Return
		}
	}
}

// assignLanes gives each operation the lowest client lane free when it is invoked (lanes are
// only rows of the visualization: the model does not look at them).
func assignLanes(hist []porcupine.Operation) {
	order := make([]int, len(hist))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(hist[a].Call, hist[b].Call) })
	var busyUntil []int64 // per lane, the return of its latest operation
	for _, i := range order {
		lane := slices.IndexFunc(busyUntil, func(end int64) bool { return end < hist[i].Call })
		if lane < 0 {
			lane = len(busyUntil)
			busyUntil = append(busyUntil, 0)
		}
		busyUntil[lane] = hist[i].Return
		hist[i].ClientId = lane
	}
}
