package linearize

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// plainModel is the specification alone: the stock and the table of the package
// documentation, without the landmarks and the order of unknown purchases the search uses.
func plainModel(initial int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return initial },
		Step: func(st, in, out any) (bool, any) {
			s := st.(int)
			switch op := in.(input).op.(type) {
			case Purchase:
				q := op.Quantity
				switch o := out.(type) {
				case Sold:
					return s >= q && o.Remaining == s-q, s - q
				case SoldOut:
					return s <= 0, s
				case Insufficient:
					return s < q, s
				case Refused:
					return true, s
				case Indeterminate:
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
		},
	}
}

// randomHistory returns a small history of item 1: a linearizable one (every operation
// takes effect at a random instant of its window), with one answer changed at random half
// of the time.
func randomHistory(rng *rand.Rand) (ops []Operation, stock int) {
	stock = rng.IntN(7)
	type gen struct {
		Operation
		at      int
		applies bool
	}
	var gs []gen
	for range 2 + rng.IntN(8) {
		call := rng.IntN(40)
		g := gen{at: call + rng.IntN(10)}
		g.Operation = at(buy(1+rng.IntN(3)), nil, call, g.at+rng.IntN(10))
		switch rng.IntN(6) {
		case 0, 1:
			g.Op = read()
		case 2, 3:
			g.Outcome, g.applies = Indeterminate{Cause: "timeout"}, rng.IntN(2) == 0
		}
		gs = append(gs, g)
	}
	slices.SortStableFunc(gs, func(a, b gen) int { return a.at - b.at })
	s := stock
	for _, g := range gs {
		switch op := g.Op.(type) {
		case Read:
			g.Outcome = Stock{Units: s}
		case Purchase:
			switch q := op.Quantity; {
			case g.Outcome != nil:
				if g.applies && s >= q {
					s -= q
				}
			case s <= 0:
				g.Outcome = SoldOut{}
			case s < q:
				g.Outcome = Insufficient{}
			default:
				s -= q
				g.Outcome = Sold{Remaining: s}
			}
		}
		ops = append(ops, g.Operation)
	}
	if rng.IntN(2) == 0 {
		o := &ops[rng.IntN(len(ops))]
		switch o.Op.(type) {
		case Read:
			o.Outcome = Stock{Units: rng.IntN(7)}
		case Purchase:
			o.Outcome = []Outcome{SoldOut{}, Insufficient{}, Indeterminate{Cause: "timeout"},
				Sold{Remaining: rng.IntN(6)}}[rng.IntN(4)]
		}
	}
	return ops, stock
}

// TestSearchRulesKeepTheSpecification checks random small histories with the model and with
// the plain specification: the landmarks, the orders the model imposes and the refusals
// moved to their return (canonicalize) only prune orders that fail, so both must agree on
// every history.
func TestSearchRulesKeepTheSpecification(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	verdicts := map[porcupine.CheckResult]int{}
	for i := range 20000 {
		ops, stock := randomHistory(rng)
		hist, _, _ := prepare(ops)
		want := porcupine.CheckOperationsTimeout(plainModel(stock), hist, 10*time.Second)
		canonicalize(hist)
		got := porcupine.CheckOperationsTimeout(stockModel(stock, landmarksOf(hist)), hist, 10*time.Second)
		if got != want || want == porcupine.Unknown {
			t.Fatalf("history %d (stock %d): model says %s, the specification %s:\n%+v", i, stock, got, want, ops)
		}
		verdicts[want]++
	}
	if verdicts[porcupine.Ok] < 5000 || verdicts[porcupine.Illegal] < 2000 {
		t.Fatalf("the random histories are too one-sided: %v", verdicts)
	}
	t.Logf("%v", verdicts)
}

func TestSearchRulesKeepTheseHistories(t *testing.T) {
	u := func(q, call int) Operation { return at(buy(q), Indeterminate{Cause: "timeout"}, call, call+5) }
	for _, tc := range []struct {
		name  string
		stock int
		ops   []Operation
		want  Result
	}{
		{"the later unknown purchase of a quantity took effect", 10, []Operation{
			u(1, 0), u(1, 20), at(read(), Stock{Units: 10}, 30, 40), at(read(), Stock{Units: 9}, 50, 60),
		}, Ok},
		{"both took effect, between reads", 10, []Operation{
			u(1, 0), at(read(), Stock{Units: 10}, 6, 7), u(1, 20), at(read(), Stock{Units: 9}, 30, 40),
			at(read(), Stock{Units: 8}, 50, 60),
		}, Ok},
		{"an unknown purchase cannot jump a read", 10, []Operation{
			u(2, 0), at(read(), Stock{Units: 9}, 30, 40),
		}, Illegal},
		{"two unknown purchases land on the read", 10, []Operation{
			u(2, 0), u(1, 1), at(read(), Stock{Units: 9}, 30, 40), at(read(), Stock{Units: 7}, 50, 60),
		}, Ok},
		{"an unknown purchase after a sale that starts where it stood", 10, []Operation{
			u(1, 0), at(buy(1), Sold{Remaining: 9}, 20, 30), at(read(), Stock{Units: 8}, 40, 50),
		}, Ok},
		{"an unknown purchase before the sale whose receipt starts below", 10, []Operation{
			u(1, 0), at(buy(1), Sold{Remaining: 8}, 20, 30),
		}, Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantResult(t, checkOne(t, tc.stock, tc.ops...), tc.want)
		})
	}
}
