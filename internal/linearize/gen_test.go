package linearize

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// generate returns a linearizable history of about n operations on item 1 by clients
// concurrent clients (each one sequential), and the initial stock: every operation takes
// effect at a random instant of its window, in the order of those instants. Three in four
// are purchases of 1..3 units (the stock runs out about 4/5 of the way through), one in five
// reads; a share unknown of the purchases get no answer (and half of those never apply).
func generate(seed uint64, n, clients int, unknown float64) ([]Operation, int) {
	return generateMix(seed, n, clients, unknown, 0.2, 4.0/5)
}

func generateMix(seed uint64, n, clients int, unknown, reads, sellOut float64) ([]Operation, int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	type gen struct {
		Operation
		at      time.Duration // the instant it takes effect
		applies bool          // for an unknown purchase
	}
	ops := make([]gen, 0, n)
	for c := range clients {
		t := time.Duration(rng.IntN(100))
		for range n / clients {
			g := gen{Operation: Operation{Call: t, Ended: true}}
			g.at = t + time.Duration(1+rng.IntN(100))
			g.Return = g.at + time.Duration(1+rng.IntN(100))
			t = g.Return + time.Duration(1+rng.IntN(50))
			switch r := rng.Float64(); {
			case r < reads:
				g.Op = read()
			default:
				g.Op = buy(1 + rng.IntN(3))
				if rng.Float64() < unknown {
					g.Outcome = Indeterminate{Cause: "timeout"}
					g.applies = rng.IntN(2) == 0
				}
			}
			_ = c
			ops = append(ops, g)
		}
	}
	stock := int(float64(n) * (1 - reads) * 2 * sellOut)
	slices.SortStableFunc(ops, func(a, b gen) int { return int(a.at - b.at) })
	s := stock
	hist := make([]Operation, len(ops))
	for i, g := range ops {
		switch op := g.Op.(type) {
		case Read:
			g.Outcome = Stock{Units: s}
		case Purchase:
			q := op.Quantity
			switch {
			case g.Outcome != nil: // unknown
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
		hist[i] = g.Operation
	}
	rng.Shuffle(len(hist), func(i, j int) { hist[i], hist[j] = hist[j], hist[i] })
	return hist, stock
}

func TestGeneratedHistories(t *testing.T) {
	for seed := range uint64(5) {
		hist, stock := generate(seed, 2000, 64, 0.02)
		opts := Options{Stock: map[int64]int{item: stock}, Timeout: time.Minute}
		res, err := Check(context.Background(), hist, opts)
		if err != nil {
			t.Fatal(err)
		}
		wantResult(t, res[0], Ok)
		// One sale told one unit less than it left: the history no longer has an order.
		i := slices.IndexFunc(hist, func(o Operation) bool { s, ok := o.Outcome.(Sold); return ok && s.Remaining > 100 })
		hist[i].Outcome = Sold{Remaining: hist[i].Outcome.(Sold).Remaining - 1}
		res, err = Check(context.Background(), hist, opts)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Result != Illegal {
			t.Fatalf("seed %d: a wrong receipt was not found: %+v", seed, res[0])
		}
		t.Logf("seed %d: %s in %v (%s)", seed, res[0].Result, res[0].Elapsed, res[0].Reason)
	}
}

// BenchmarkCheck checks one item's history of 10,000 operations by 64 concurrent clients.
func BenchmarkCheck(b *testing.B) {
	for _, unknown := range []float64{0, 0.01, 0.05} {
		b.Run(fmtShare(unknown), func(b *testing.B) {
			hist, stock := generate(1, 10000, 64, unknown)
			opts := Options{Stock: map[int64]int{item: stock}, Timeout: time.Minute}
			for b.Loop() {
				res, err := Check(context.Background(), hist, opts)
				if err != nil || res[0].Result != Ok {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
	}
}

func fmtShare(f float64) string {
	return "unknown=" + time.Duration(f*100*float64(time.Second)).String()
}
