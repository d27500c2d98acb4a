package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// workload describes a generated history of one item: n operations by clients concurrent
// clients (each one sequential), a share reads of them reads of the stock, the others
// purchases of 1..3 units; a share unknown of the purchases get no answer (half of those
// never take effect); the stock runs out a share sellOut of the way through. A naive
// workload's purchases read the stock at some instant of their window and write what they
// computed from it later (a lost update when another write falls in between).
type workload struct {
	n, clients              int
	reads, unknown, sellOut float64
	naive                   bool
}

// generate returns a history of w, and the initial stock. Unless naive, every operation
// takes effect at a random instant of its window, in the order of those instants: the
// history is linearizable.
func (w workload) generate(seed uint64) ([]Operation, int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	type event struct {
		at   time.Duration
		op   int  // index in ops
		read bool // a naive purchase's read
	}
	var ops []Operation
	var events []event
	applies := map[int]bool{} // unknown purchases that take effect
	for range w.clients {
		t := time.Duration(rng.IntN(100))
		for range w.n / w.clients {
			o := Operation{Call: t, Ended: true}
			at := t + time.Duration(1+rng.IntN(100))
			o.Return = at + time.Duration(1+rng.IntN(100))
			t = o.Return + time.Duration(1+rng.IntN(50))
			i := len(ops)
			if rng.Float64() < w.reads {
				o.Op = read()
			} else {
				o.Op = buy(1 + rng.IntN(3))
				if rng.Float64() < w.unknown {
					o.Outcome, applies[i] = Indeterminate{Cause: "timeout"}, rng.IntN(2) == 0
				}
				if w.naive {
					events = append(events, event{at: o.Call + time.Duration(rng.Int64N(int64(at-o.Call))), op: i, read: true})
				}
			}
			events = append(events, event{at: at, op: i})
			ops = append(ops, o)
		}
	}
	stock := int(float64(w.n) * (1 - w.reads) * 2 * w.sellOut)
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	s := stock
	seen := map[int]int{} // what each naive purchase read
	for _, e := range events {
		o := &ops[e.op]
		if e.read {
			seen[e.op] = s
			continue
		}
		from, ok := seen[e.op]
		if !ok {
			from = s
		}
		switch op := o.Op.(type) {
		case Read:
			o.Outcome = Stock{Units: s}
		case Purchase:
			switch q := op.Quantity; {
			case o.Outcome != nil: // unknown
				if applies[e.op] && from >= q {
					s = from - q
				}
			case from <= 0:
				o.Outcome = SoldOut{}
			case from < q:
				o.Outcome = Insufficient{}
			default:
				s = from - q
				o.Outcome = Sold{Remaining: s}
			}
		}
	}
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	return ops, stock
}

// mixed is the workload of the tests and the benchmark, unknown aside.
func mixed(n int, unknown float64) workload {
	return workload{n: n, clients: 64, reads: 0.2, unknown: unknown, sellOut: 0.8}
}

func TestGeneratedHistories(t *testing.T) {
	for seed := range uint64(5) {
		hist, stock := mixed(2000, 0.02).generate(seed)
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

func TestGeneratedNaiveHistories(t *testing.T) {
	for seed := range uint64(3) {
		w := mixed(2000, 0.02)
		w.naive = true
		hist, stock := w.generate(seed)
		res, err := Check(context.Background(), hist, Options{Stock: map[int64]int{item: stock}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wantResult(t, res[0], Illegal)
		t.Logf("seed %d: %s in %v (%s)", seed, res[0].Result, res[0].Elapsed, res[0].Reason)
	}
}

// BenchmarkCheck checks one item's history of 10,000 operations by 64 concurrent clients,
// one in five a read: linearizable with a share of unknown purchases, or naive (lost
// updates), then with the visualization written.
func BenchmarkCheck(b *testing.B) {
	for _, unknown := range []float64{0, 0.01, 0.05} {
		b.Run(fmt.Sprintf("ok/unknown=%g%%", unknown*100), func(b *testing.B) {
			benchCheck(b, mixed(10000, unknown), Ok, nil)
		})
	}
	naive := mixed(10000, 0.01)
	naive.naive = true
	b.Run("naive", func(b *testing.B) { benchCheck(b, naive, Illegal, nil) })
	b.Run("naive+visualization", func(b *testing.B) {
		dir := b.TempDir()
		benchCheck(b, naive, Illegal, func(int64) string { return filepath.Join(dir, "item.html") })
	})
}

func benchCheck(b *testing.B, w workload, want Result, vis func(int64) string) {
	hist, stock := w.generate(1)
	opts := Options{Stock: map[int64]int{item: stock}, Timeout: time.Minute, VisualizationPath: vis}
	for b.Loop() {
		res, err := Check(context.Background(), hist, opts)
		if err != nil || res[0].Result != want {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
