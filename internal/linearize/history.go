package linearize

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

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
