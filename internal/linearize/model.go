package linearize

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// input is what the model steps on: an operation, and how many attempts (requests sharing
// one Idempotency-Key) it stands for. A purchase of unknown outcome, and a read, also have
// their rank among those of the same quantity, or of the same value read, in the order
// they were sent (see state).
type input struct {
	op       Op
	key      string
	attempts int
	rank     int
}

// state is an item's state in the model: its stock; how many reads of that stock have been
// ordered since the stock took that value; how many purchases of unknown outcome have been
// ordered, per quantity.
//
// The last two are there for the search, not for the specification: they make it try one
// order of interchangeable operations, not every subset of them. Purchases of unknown
// outcome and equal quantity are interchangeable but for when they were sent, so the model
// orders them in that order (one sent earlier can take the place of one sent later in any
// order). The operations ordered while the stock keeps one value change nothing, so they can
// be ordered among themselves as they were sent; the model orders the reads of each value
// so. With the landmarks, this accepts exactly the histories the stock alone accepts.
type state struct {
	units   int
	reads   int
	unknown []int // index: the quantity; never modified, copied on change
}

// landmarks are the stock values a history says the item went through: the stock before
// each sale (a receipt says the stock was remaining+quantity just before it) and the stock
// each read returned.
//
// They are there for the search, not for the specification. The stock never goes up, so
// each landmark is one stretch of the order, and the model refuses a step that would leave
// it too soon: a decrement that jumps over a landmark, one that leaves a value before all
// its reads are ordered, and a purchase of unknown outcome that leaves a value where a
// receipt says a sale started (that sale could no longer be placed). Each refused step leads only to orders that fail later, when
// a read or a sale that can no longer be placed returns (then the search would retry every
// order of everything in between); the model accepts exactly the orders the stock alone
// accepts. (A model in which the stock can go up, a restock, needs other landmarks.)
type landmarks struct {
	reads  map[int]int // value -> the history's reads of it
	starts map[int]int // value -> the history's sales that start there
	sorted []int       // every landmark, ascending
}

// landmarksOf returns the landmarks of one item's history.
func landmarksOf(hist []porcupine.Operation) landmarks {
	lm := landmarks{reads: map[int]int{}, starts: map[int]int{}}
	for _, h := range hist {
		switch out := h.Output.(type) {
		case Stock:
			lm.reads[out.Units]++
		case Sold:
			if p, ok := h.Input.(input).op.(Purchase); ok {
				lm.starts[out.Remaining+p.Quantity]++
			}
		}
	}
	for _, m := range []map[int]int{lm.reads, lm.starts} {
		for v := range m {
			lm.sorted = append(lm.sorted, v)
		}
	}
	slices.Sort(lm.sorted)
	lm.sorted = slices.Compact(lm.sorted)
	return lm
}

// stockModel is the specification of one item whose stock is initially initial, with the
// landmarks of its history. Step is the table of the package documentation.
func stockModel(initial int, lm landmarks) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return state{units: initial} },
		Step: func(s, in, out any) (bool, any) {
			return step(s.(state), in.(input), out.(Outcome), lm)
		},
		Equal: func(a, b any) bool {
			sa, sb := a.(state), b.(state)
			return sa.units == sb.units && sa.reads == sb.reads && slices.Equal(sa.unknown, sb.unknown)
		},
		// The operations already ordered, which porcupine hashes beside, set unknown.
		Hash: func(s any) uint64 {
			st := s.(state)
			return (uint64(st.units)<<20 ^ uint64(st.reads)) * 0x9e3779b97f4a7c15
		},
		DescribeOperation:         func(in, out any) string { return in.(input).op.describe(out.(Outcome)) },
		DescribeState:             func(s any) string { return fmt.Sprintf("%d in stock", s.(state).units) },
		DescribeOperationMetadata: func(m any) string { s, _ := m.(string); return s },
	}
}

// step applies one operation, with its outcome, to the state s: whether the outcome is one
// the operation can have at s, and the state after it.
func step(s state, in input, out Outcome, lm landmarks) (bool, state) {
	switch op := in.op.(type) {
	case Purchase:
		q := op.Quantity
		switch o := out.(type) {
		case Sold:
			if s.units >= q && o.Remaining == s.units-q {
				return lm.take(s, q, true)
			}
			return false, s
		case SoldOut:
			return s.units <= 0, s
		case Insufficient:
			return s.units < q, s
		case Refused:
			return true, s
		case Indeterminate: // took effect here (a conditional decrement), or never: then it is
			// ordered after everything else, where it changes nothing that is checked
			if q <= 0 {
				return true, s // an invalid quantity: refused
			}
			if s.unknownOrdered(q) != in.rank {
				return false, s // one of its quantity sent before it is not ordered yet
			}
			next := s
			if s.units >= q {
				ok := false
				if ok, next = lm.take(s, q, false); !ok {
					return false, s
				}
			}
			next.unknown = slices.Clone(s.unknown)
			if q >= len(next.unknown) {
				next.unknown = append(next.unknown, make([]int, q+1-len(next.unknown))...)
			}
			next.unknown[q]++
			return true, next
		}
	case Read:
		switch o := out.(type) {
		case Stock:
			if o.Units == s.units && in.rank == s.reads {
				return true, state{units: s.units, reads: s.reads + 1, unknown: s.unknown}
			}
			return false, s
		case Indeterminate:
			return true, s
		}
	}
	return false, s
}

// unknownOrdered returns how many purchases of unknown outcome of q units are ordered.
func (s state) unknownOrdered(q int) int {
	if q < len(s.unknown) {
		return s.unknown[q]
	}
	return 0
}

// take sells q units at s, if the landmarks allow it: receipted tells a sale with a receipt
// (whose stock before is s.units) from one of unknown outcome.
func (lm landmarks) take(s state, q int, receipted bool) (bool, state) {
	if q == 0 {
		return true, s
	}
	if s.reads < lm.reads[s.units] || (!receipted && lm.starts[s.units] > 0) {
		return false, s
	}
	after := s.units - q
	if i, _ := slices.BinarySearch(lm.sorted, after+1); i < len(lm.sorted) && lm.sorted[i] < s.units {
		return false, s // a landmark strictly between after and s.units would be skipped
	}
	return true, state{units: after, unknown: s.unknown}
}
