package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// counter is an in-memory storefront for one item: atomic purchases (checked and written
// under one mutex, at most one order per key), or naive ones (read, work, write what was
// computed from the read).
type counter struct {
	naive bool
	work  time.Duration // the naive purchase's pause between its read and its write

	mu     sync.Mutex
	stock  int
	orders map[string]int // key -> remaining of its order
}

func (c *counter) purchase(q int, key string) Outcome {
	if c.naive {
		c.mu.Lock()
		s := c.stock
		c.mu.Unlock()
		if s < q {
			return Insufficient{}
		}
		time.Sleep(c.work)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stock = s - q
		return Sold{Remaining: s - q}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.orders[key]; ok && key != "" {
		return Sold{Remaining: r}
	}
	switch {
	case c.stock <= 0:
		return SoldOut{}
	case c.stock < q:
		return Insufficient{}
	}
	c.stock -= q
	if key != "" {
		c.orders[key] = c.stock
	}
	return Sold{Remaining: c.stock}
}

func (c *counter) read() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stock
}

// jitter sleeps up to max, so that the calls of the clients overlap.
func jitter(rng *rand.Rand, max time.Duration) {
	time.Sleep(time.Duration(rng.Int64N(int64(max))))
}

func TestAtomicCounterIsLinearizable(t *testing.T) {
	const clients, perClient, stock = 16, 40, 150
	c := &counter{stock: stock, orders: map[string]int{}}
	rec := NewRecorder()
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(cl), 1))
			for i := range perClient {
				key := fmt.Sprintf("c%d-%d", cl, i)
				switch n := rng.IntN(10); {
				case n < 2:
					call := rec.Begin(read())
					jitter(rng, 200*time.Microsecond)
					s := c.read()
					jitter(rng, 200*time.Microsecond)
					call.End(Stock{Units: s})
				case n < 3: // refused before anything was done
					call := rec.Begin(buy(1))
					jitter(rng, 100*time.Microsecond)
					call.End(Refused{Code: "lock_timeout"})
				case n < 4: // applied, but the client timed out first; then replayed, or not
					q := 1 + rng.IntN(3)
					call := rec.Begin(buyKey(q, key))
					jitter(rng, 100*time.Microsecond)
					call.Unknown("timeout")
					c.purchase(q, key)
					if rng.IntN(2) == 0 {
						replay := rec.Begin(buyKey(q, key))
						replay.End(c.purchase(q, key))
					}
				case n < 5: // sent twice at once
					q := 1 + rng.IntN(3)
					var twice sync.WaitGroup
					for range 2 {
						twice.Go(func() {
							call := rec.Begin(buyKey(q, key))
							call.End(c.purchase(q, key))
						})
					}
					twice.Wait()
				default:
					q := 1 + rng.IntN(3)
					call := rec.Begin(buyKey(q, key))
					jitter(rng, 200*time.Microsecond)
					out := c.purchase(q, key)
					jitter(rng, 200*time.Microsecond)
					call.End(out)
				}
			}
		})
	}
	wg.Wait()
	if c.stock > 0 {
		t.Fatalf("the run left %d units: it never reached sold out", c.stock)
	}
	res, err := rec.Check(context.Background(), Options{Stock: map[int64]int{item: stock}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, res[0], Ok)
	if res[0].Indeterminate == 0 || res[0].Skipped == 0 {
		t.Fatalf("the run lacks unknown or refused purchases: %+v", res[0])
	}
	t.Logf("%+v", res[0])
}

func TestNaiveCounterIsNotLinearizable(t *testing.T) {
	const clients, perClient, stock = 8, 10, 100
	for run := 1; ; run++ {
		c := &counter{naive: true, stock: stock, work: 500 * time.Microsecond}
		rec := NewRecorder()
		var wg sync.WaitGroup
		for cl := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(cl), uint64(run)))
				for range perClient {
					q := 1 + rng.IntN(2)
					call := rec.Begin(buy(q))
					call.End(c.purchase(q, ""))
					jitter(rng, 100*time.Microsecond)
				}
			})
		}
		wg.Wait()
		sold := 0
		for _, o := range rec.Operations() {
			if _, ok := o.Outcome.(Sold); ok {
				sold += o.Op.(Purchase).Quantity
			}
		}
		if sold == stock-c.read() { // no lost update happened: nothing to find
			if run == 5 {
				t.Fatalf("5 naive runs lost no update")
			}
			continue
		}
		t.Logf("run %d: %d units sold, the stock says %d", run, sold, stock-c.read())
		res, err := rec.Check(context.Background(), Options{Stock: map[int64]int{item: stock}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wantResult(t, res[0], Illegal)
		return
	}
}

func TestRecorderConcurrentUse(t *testing.T) {
	const clients, perClient = 64, 200
	rec := NewRecorder()
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Go(func() {
			for i := range perClient {
				call := rec.Begin(Purchase{Item: int64(cl % 4), Quantity: 1})
				switch i % 3 {
				case 0:
					call.End(Sold{Remaining: i})
					call.Unknown("late") // the first end counts
				case 1:
					call.Unknown("timeout")
				}
				// i%3 == 2: never ended
			}
		})
	}
	wg.Go(func() { // a reader of the history while it grows
		for range 50 {
			for _, o := range rec.Operations() {
				if o.Ended && o.Return < o.Call {
					t.Errorf("an operation returned before it was called: %+v", o)
				}
			}
		}
	})
	wg.Wait()
	ops := rec.Operations()
	if len(ops) != clients*perClient || rec.Len() != len(ops) {
		t.Fatalf("%d operations, want %d", len(ops), clients*perClient)
	}
	var sold, unknown, open int
	for _, o := range ops {
		switch {
		case !o.Ended:
			open++
		case o.Return < o.Call:
			t.Fatalf("an operation returned before it was called: %+v", o)
		default:
			switch o.Outcome.(type) {
			case Sold:
				sold++
			case Indeterminate:
				unknown++
			}
		}
	}
	if want := clients * ((perClient + 2) / 3); sold != want || unknown != clients*((perClient+1)/3) || open != clients*(perClient/3) {
		t.Fatalf("sold %d (want %d), unknown %d, open %d", sold, want, unknown, open)
	}
}
