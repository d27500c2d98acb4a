package linearize

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const item = 1

// at is one hand-built operation on item 1, answered: its window is [call, ret].
func at(op Op, out Outcome, call, ret int) Operation {
	return Operation{Op: op, Outcome: out, Call: time.Duration(call), Return: time.Duration(ret), Ended: true}
}

func buy(q int) Purchase              { return Purchase{Item: item, Quantity: q} }
func buyKey(q int, k string) Purchase { return Purchase{Item: item, Quantity: q, Key: k} }
func read() Read                      { return Read{Item: item} }

// checkOne checks a history of item 1 whose initial stock is stock.
func checkOne(t *testing.T, stock int, ops ...Operation) ItemResult {
	t.Helper()
	res, err := Check(context.Background(), ops, Options{Stock: map[int64]int{item: stock}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Item != item {
		t.Fatalf("results %+v, want one for item %d", res, item)
	}
	return res[0]
}

func wantResult(t *testing.T, got ItemResult, want Result) {
	t.Helper()
	if got.Result != want {
		t.Fatalf("result %s (%s), want %s", got.Result, got.Reason, want)
	}
}

func TestSequentialHistoryIsOk(t *testing.T) {
	got := checkOne(t, 5,
		at(buy(2), Sold{Remaining: 3}, 0, 10),
		at(read(), Stock{Units: 3}, 20, 30),
		at(buy(3), Sold{Remaining: 0}, 40, 50),
		at(buy(1), SoldOut{}, 60, 70),
		at(buy(2), Insufficient{}, 80, 90),
		at(read(), Stock{Units: 0}, 100, 110),
	)
	wantResult(t, got, Ok)
	if got.Checked != 6 || got.Indeterminate != 0 || got.Skipped != 0 {
		t.Fatalf("counts %+v", got)
	}
}

func TestOverlappingSalesWithOneRemainingAreALostUpdate(t *testing.T) {
	got := checkOne(t, 5,
		at(buy(1), Sold{Remaining: 4}, 0, 10),
		at(buy(1), Sold{Remaining: 4}, 1, 11),
	)
	wantResult(t, got, Illegal)
	if !strings.Contains(got.Reason, "the longest partial order places 1") {
		t.Fatalf("reason %q", got.Reason)
	}
	// The same two answers one after the other in a correct order are a history.
	wantResult(t, checkOne(t, 5,
		at(buy(1), Sold{Remaining: 3}, 0, 10),
		at(buy(1), Sold{Remaining: 4}, 1, 11),
	), Ok)
}

func TestOversellIsIllegal(t *testing.T) {
	t.Run("negative remaining", func(t *testing.T) {
		wantResult(t, checkOne(t, 1,
			at(buy(1), Sold{Remaining: 0}, 0, 10),
			at(buy(1), Sold{Remaining: -1}, 20, 30),
		), Illegal)
	})
	t.Run("more units sold than stock", func(t *testing.T) {
		// Either order leaves the second sale short: 2 -> 0 then 1 of 0, or 2 -> 1 then 2 of 1.
		wantResult(t, checkOne(t, 2,
			at(buy(2), Sold{Remaining: 0}, 0, 10),
			at(buy(1), Sold{Remaining: 1}, 5, 15),
		), Illegal)
	})
	t.Run("an unknown purchase cannot oversell either", func(t *testing.T) {
		wantResult(t, checkOne(t, 1,
			at(buy(1), Indeterminate{Cause: "timeout"}, 0, 10),
			at(buy(1), Sold{Remaining: 0}, 20, 30),
			at(read(), Stock{Units: -1}, 40, 50),
		), Illegal)
	})
}

func TestReads(t *testing.T) {
	t.Run("stale read after the sale is illegal", func(t *testing.T) {
		wantResult(t, checkOne(t, 5,
			at(buy(2), Sold{Remaining: 3}, 0, 10),
			at(read(), Stock{Units: 5}, 20, 30),
		), Illegal)
	})
	t.Run("either value during the sale is ok", func(t *testing.T) {
		for _, n := range []int{5, 3} {
			wantResult(t, checkOne(t, 5,
				at(buy(2), Sold{Remaining: 3}, 0, 30),
				at(read(), Stock{Units: n}, 10, 20),
			), Ok)
		}
	})
	t.Run("reads going back in time are illegal", func(t *testing.T) {
		wantResult(t, checkOne(t, 5,
			at(buy(2), Sold{Remaining: 3}, 0, 100),
			at(read(), Stock{Units: 3}, 10, 20),
			at(read(), Stock{Units: 5}, 30, 40),
		), Illegal)
	})
	t.Run("a read without answer promises nothing", func(t *testing.T) {
		got := checkOne(t, 5, at(read(), Indeterminate{Cause: "timeout"}, 0, 10))
		wantResult(t, got, Ok)
		if got.Skipped != 1 || got.Checked != 0 {
			t.Fatalf("counts %+v", got)
		}
	})
}

func TestUnknownPurchaseMayOrMayNotHaveApplied(t *testing.T) {
	for _, tc := range []struct {
		name  string
		units int
		want  Result
	}{
		{"applied", 3, Ok},
		{"not applied", 5, Ok},
		{"applied twice", 1, Illegal},
		{"applied in part", 4, Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkOne(t, 5,
				at(buy(2), Indeterminate{Cause: "timeout"}, 0, 10),
				at(read(), Stock{Units: tc.units}, 20, 30),
			)
			wantResult(t, got, tc.want)
			if got.Indeterminate != 1 {
				t.Fatalf("counts %+v", got)
			}
		})
	}
	t.Run("after the client gave up", func(t *testing.T) {
		// The timeout at 10 does not bound the write: it may land after the read at 20..30.
		wantResult(t, checkOne(t, 5,
			at(buy(2), Indeterminate{Cause: "timeout"}, 0, 10),
			at(read(), Stock{Units: 5}, 20, 30),
			at(read(), Stock{Units: 3}, 40, 50),
		), Ok)
	})
	t.Run("never ended", func(t *testing.T) {
		wantResult(t, checkOne(t, 5,
			Operation{Op: buy(2), Call: 0},
			at(read(), Stock{Units: 3}, 20, 30),
		), Ok)
	})
}

func TestSoldOutAndInsufficient(t *testing.T) {
	t.Run("sold out while units were there the whole time", func(t *testing.T) {
		wantResult(t, checkOne(t, 5,
			at(buy(1), Sold{Remaining: 4}, 0, 10),
			at(buy(1), SoldOut{}, 20, 30),
			at(buy(1), Sold{Remaining: 3}, 40, 50),
		), Illegal)
	})
	t.Run("sold out while the last unit was being sold", func(t *testing.T) {
		wantResult(t, checkOne(t, 1,
			at(buy(1), Sold{Remaining: 0}, 0, 30),
			at(buy(1), SoldOut{}, 10, 20),
		), Ok)
	})
	t.Run("sold out promises none left, not just too few", func(t *testing.T) {
		wantResult(t, checkOne(t, 1, at(buy(2), SoldOut{}, 0, 10)), Illegal)
		wantResult(t, checkOne(t, 1, at(buy(2), Insufficient{}, 0, 10)), Ok)
	})
	t.Run("insufficient while enough units were there", func(t *testing.T) {
		wantResult(t, checkOne(t, 5, at(buy(2), Insufficient{}, 0, 10)), Illegal)
	})
	t.Run("insufficient once a concurrent sale took the units", func(t *testing.T) {
		wantResult(t, checkOne(t, 5,
			at(buy(4), Sold{Remaining: 1}, 0, 30),
			at(buy(2), Insufficient{}, 10, 40),
		), Ok)
	})
	t.Run("insufficient before a sale that a timeout hid", func(t *testing.T) {
		// The unknown purchase must have applied (before the refusal) for it to be true.
		wantResult(t, checkOne(t, 5,
			at(buy(4), Indeterminate{Cause: "timeout"}, 0, 10),
			at(buy(2), Insufficient{}, 20, 30),
			at(read(), Stock{Units: 1}, 40, 50),
		), Ok)
		wantResult(t, checkOne(t, 5,
			at(buy(4), Indeterminate{Cause: "timeout"}, 0, 10),
			at(buy(2), Insufficient{}, 20, 30),
			at(read(), Stock{Units: 5}, 40, 50),
		), Illegal)
	})
}

// A batch that admits a purchase and answers the next one from the stock it has not written
// yet tells that buyer "insufficient" while the units are all still there. Seen from the
// clients, the sale may have taken effect before the refusal, unless something shows it
// did not: a read, or the batch failing.
func TestRefusalFromUnwrittenStock(t *testing.T) {
	t.Run("answered before the batch commits", func(t *testing.T) {
		hist := []Operation{
			at(buy(2), Sold{Remaining: 1}, 0, 100), // its batch commits at 80
			at(buy(2), Insufficient{}, 10, 30),     // answered at 30 from 3-2
		}
		wantResult(t, checkOne(t, 3, hist...), Ok)
		wantResult(t, checkOne(t, 3, append(hist, at(read(), Stock{Units: 3}, 40, 50))...), Illegal)
	})
	t.Run("answered after it commits", func(t *testing.T) {
		wantResult(t, checkOne(t, 3,
			at(buy(2), Sold{Remaining: 1}, 0, 100),
			at(buy(2), Insufficient{}, 10, 90),
		), Ok)
	})
	t.Run("the batch never commits", func(t *testing.T) {
		wantResult(t, checkOne(t, 3,
			at(buy(2), Refused{Code: "lock_lost"}, 0, 100),
			at(buy(2), Insufficient{}, 10, 90),
		), Illegal)
	})
}

func TestRefusedIsLeftOut(t *testing.T) {
	got := checkOne(t, 5,
		at(buy(1), Refused{Code: "lock_lost"}, 0, 10),
		at(read(), Stock{Units: 5}, 20, 30),
	)
	wantResult(t, got, Ok)
	if got.Skipped != 1 || got.Checked != 1 {
		t.Fatalf("counts %+v", got)
	}
	// A refusal that wrote after all is caught by what follows it.
	wantResult(t, checkOne(t, 5,
		at(buy(1), Refused{Code: "lock_lost"}, 0, 10),
		at(read(), Stock{Units: 4}, 20, 30),
	), Illegal)
}

func TestIdempotencyKeys(t *testing.T) {
	t.Run("two attempts at once, one order", func(t *testing.T) {
		got := checkOne(t, 5,
			at(buyKey(1, "k1"), Sold{Remaining: 4}, 0, 10),
			at(buyKey(1, "k1"), Sold{Remaining: 4}, 1, 11),
			at(read(), Stock{Units: 4}, 20, 30),
		)
		wantResult(t, got, Ok)
		if got.Checked != 2 {
			t.Fatalf("counts %+v", got)
		}
	})
	t.Run("distinct keys are two orders", func(t *testing.T) {
		wantResult(t, checkOne(t, 5,
			at(buyKey(1, "k1"), Sold{Remaining: 4}, 0, 10),
			at(buyKey(1, "k2"), Sold{Remaining: 4}, 1, 11),
		), Illegal)
	})
	t.Run("a timeout then its replay", func(t *testing.T) {
		// The write fell in the first attempt: the read between the attempts saw it.
		wantResult(t, checkOne(t, 5,
			at(buyKey(2, "k1"), Indeterminate{Cause: "timeout"}, 0, 10),
			at(read(), Stock{Units: 3}, 20, 30),
			at(buyKey(2, "k1"), Sold{Remaining: 3}, 40, 50),
		), Ok)
		// Checked as two purchases, it would be an oversell of the read's view.
		wantResult(t, checkOne(t, 5,
			at(buy(2), Indeterminate{Cause: "timeout"}, 0, 10),
			at(read(), Stock{Units: 3}, 20, 30),
			at(buy(2), Sold{Remaining: 3}, 40, 50),
		), Illegal)
	})
	t.Run("attempts told different receipts", func(t *testing.T) {
		got := checkOne(t, 5,
			at(buyKey(1, "k1"), Sold{Remaining: 4}, 0, 10),
			at(buyKey(1, "k1"), Sold{Remaining: 3}, 20, 30),
		)
		wantResult(t, got, Illegal)
		if !strings.Contains(got.Reason, `key "k1" were answered remaining 4 and 3`) {
			t.Fatalf("reason %q", got.Reason)
		}
	})
	t.Run("an attempt of the key told sold out stays a refusal of its own", func(t *testing.T) {
		wantResult(t, checkOne(t, 1,
			at(buyKey(1, "k1"), Sold{Remaining: 0}, 0, 10),
			at(buyKey(1, "k1"), SoldOut{}, 20, 30),
		), Ok)
		wantResult(t, checkOne(t, 2,
			at(buyKey(1, "k1"), Sold{Remaining: 1}, 0, 10),
			at(buyKey(1, "k1"), SoldOut{}, 20, 30),
		), Illegal)
	})
}

func TestTimeoutReportsUnknown(t *testing.T) {
	// 40 concurrent purchases of unknown outcome, of 1 to 40 units, then a read that no
	// subset of them explains (they sum to 820): deciding it takes 2^40 steps, so the bounded
	// check must say Unknown, never Ok.
	var ops []Operation
	for i := range 40 {
		ops = append(ops, at(buy(i+1), Indeterminate{Cause: "timeout"}, i, 50+i))
	}
	ops = append(ops, at(read(), Stock{Units: 1000 - 821}, 100, 110))
	start := time.Now()
	res, err := Check(context.Background(), ops, Options{Stock: map[int64]int{item: 1000}, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, res[0], Unknown)
	if !strings.Contains(res[0].Reason, "undecided after 50ms") {
		t.Fatalf("reason %q", res[0].Reason)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the bounded check took %v", el)
	}
	if Overall(res) != Unknown {
		t.Fatalf("overall %s", Overall(res))
	}

	// A context that is already done checks nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = Check(ctx, ops[:1], Options{Stock: map[int64]int{item: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, res[0], Unknown)
	if !strings.Contains(res[0].Reason, "not checked: context canceled") {
		t.Fatalf("reason %q", res[0].Reason)
	}
}

func TestItemsAreCheckedApart(t *testing.T) {
	ops := []Operation{
		at(Purchase{Item: 7, Quantity: 1}, Sold{Remaining: 0}, 0, 10),
		at(Purchase{Item: 3, Quantity: 1}, Sold{Remaining: 1}, 0, 10),
		at(Read{Item: 3}, Stock{Units: 2}, 20, 30), // stale: item 3 is illegal
		at(Read{Item: 7}, Stock{Units: 0}, 20, 30),
	}
	res, err := Check(context.Background(), ops, Options{Stock: map[int64]int{3: 2, 7: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Item != 3 || res[0].Result != Illegal || res[1].Item != 7 || res[1].Result != Ok {
		t.Fatalf("results %+v", res)
	}
	if Overall(res) != Illegal || Overall(res[1:]) != Ok {
		t.Fatalf("overall %s / %s", Overall(res), Overall(res[1:]))
	}
	if _, err := Check(context.Background(), ops, Options{Stock: map[int64]int{3: 2}}); err == nil ||
		!strings.Contains(err.Error(), "item 7 has operations but no initial stock") {
		t.Fatalf("err %v", err)
	}
}

func TestVisualizationOfAViolation(t *testing.T) {
	dir := t.TempDir()
	ops := []Operation{
		at(buyKey(1, "k1"), Sold{Remaining: 4}, 0, 10),
		at(buy(1), Sold{Remaining: 4}, 1, 11),
		at(buy(2), Indeterminate{Cause: "timeout"}, 2, 5),
		at(read(), Stock{Units: 4}, 20, 30),
	}
	path := func(id int64) string { return filepath.Join(dir, "item.html") }
	res, err := Check(context.Background(), ops, Options{Stock: map[int64]int{item: 5}, VisualizationPath: path})
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, res[0], Illegal)
	if res[0].Visualization != path(item) {
		t.Fatalf("visualization %q", res[0].Visualization)
	}
	page, err := os.ReadFile(path(item))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"buy 1 → sold, 4 left", "buy 2 → ? (timeout)", "read → 4 in stock", `"StateDescription":"4 in stock"`, "key k1"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the visualization lacks %q", want)
		}
	}

	// An Ok history writes none, and an unwritable path is an error beside the result.
	res, err = Check(context.Background(), ops[3:], Options{Stock: map[int64]int{item: 4}, VisualizationPath: path})
	if err != nil || res[0].Result != Ok || res[0].Visualization != "" {
		t.Fatalf("%+v %v", res, err)
	}
	bad := func(int64) string { return filepath.Join(dir, "missing", "item.html") }
	res, err = Check(context.Background(), ops, Options{Stock: map[int64]int{item: 5}, VisualizationPath: bad})
	if err == nil || res[0].Result != Illegal || res[0].Visualization != "" {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestLanes(t *testing.T) {
	hist, _, _ := prepare([]Operation{
		at(buy(1), Sold{Remaining: 4}, 0, 10),
		at(buy(1), Sold{Remaining: 3}, 5, 15),
		at(buy(1), Sold{Remaining: 2}, 10, 20), // lane 0 is busy until 10 inclusive
		at(buy(1), Sold{Remaining: 1}, 11, 20),
	})
	var lanes []int
	for _, h := range hist {
		lanes = append(lanes, h.ClientId)
	}
	if want := []int{0, 1, 2, 0}; !slicesEqual(lanes, want) {
		t.Fatalf("lanes %v, want %v", lanes, want)
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPurchaseOutcome(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   Outcome
	}{
		{201, "", Sold{Remaining: 7}},
		{200, "", Sold{Remaining: 7}},
		{201, "bad_body", Indeterminate{Cause: "201 bad_body"}},
		{409, "sold_out", SoldOut{}},
		{409, "insufficient_stock", Insufficient{}},
		{503, "lock_lost", Refused{Code: "lock_lost"}},
		{503, "lock_timeout", Refused{Code: "lock_timeout"}},
		{429, "overloaded", Refused{Code: "overloaded"}},
		{422, "idempotency_conflict", Refused{Code: "idempotency_conflict"}},
		{404, "not_found", Refused{Code: "not_found"}},
		{503, "unavailable", Indeterminate{Cause: "503 unavailable"}},
		{500, "internal", Indeterminate{Cause: "500 internal"}},
		{0, "timeout", Indeterminate{Cause: "timeout"}},
		{0, "transport", Indeterminate{Cause: "transport"}},
	} {
		if got := PurchaseOutcome(tc.status, tc.code, 7); got != tc.want {
			t.Errorf("PurchaseOutcome(%d, %q) = %#v, want %#v", tc.status, tc.code, got, tc.want)
		}
	}
}
