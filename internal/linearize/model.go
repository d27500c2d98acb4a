package linearize

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// input is what the model steps on: an operation, and how many attempts (requests sharing
// one Idempotency-Key) it stands for.
type input struct {
	op       Op
	key      string
	attempts int
}

// stockModel is the sequential specification of one item: its state is the stock (an int),
// initially initial. Step is the table of the package documentation.
func stockModel(initial int) porcupine.Model {
	return porcupine.Model{
		Init:                      func() any { return initial },
		Step:                      step,
		Equal:                     func(a, b any) bool { return a.(int) == b.(int) },
		Hash:                      func(s any) uint64 { return uint64(s.(int)) * 0x9e3779b97f4a7c15 },
		DescribeOperation:         func(in, out any) string { return in.(input).op.describe(out.(Outcome)) },
		DescribeState:             func(s any) string { return fmt.Sprintf("%d in stock", s.(int)) },
		DescribeOperationMetadata: func(m any) string { s, _ := m.(string); return s },
	}
}

// step applies one operation, with its outcome, to the stock s: whether the outcome is one
// the operation can have at s, and the stock after it.
func step(state, in, out any) (bool, any) {
	s := state.(int)
	switch op := in.(input).op.(type) {
	case Purchase:
		q := op.Quantity
		switch o := out.(type) {
		case Sold:
			if s >= q && o.Remaining == s-q {
				return true, s - q
			}
			return false, s
		case SoldOut:
			return s <= 0, s
		case Insufficient:
			return s < q, s
		case Refused:
			return true, s
		case Indeterminate: // took effect here (a conditional decrement), or never: then it is
			// linearized after everything else, where it changes nothing that is checked
			if s >= q {
				return true, s - q
			}
			return true, s
		}
	case Read:
		switch o := out.(type) {
		case Stock:
			return o.Units == s, s
		case Indeterminate:
			return true, s
		}
	}
	return false, s
}
