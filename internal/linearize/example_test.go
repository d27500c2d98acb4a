package linearize_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stockguard/stockguard/internal/linearize"
)

// A load test records each request as it goes, then checks the history once the run is
// over. Item 1 starts with 5 units.
func Example() {
	rec := linearize.NewRecorder()

	// A client buys 2 units; the answer is 201 with remaining 3.
	call := rec.Begin(linearize.Purchase{Item: 1, Quantity: 2, Key: "k-1"})
	call.End(linearize.PurchaseOutcome(201, "", 3))

	// Another times out: its purchase may or may not have taken effect.
	call = rec.Begin(linearize.Purchase{Item: 1, Quantity: 1, Key: "k-2"})
	call.Unknown("timeout")

	// A read sees 2 units: the timed-out purchase did take effect.
	call = rec.Begin(linearize.Read{Item: 1})
	call.End(linearize.Stock{Units: 2})

	// A purchase refused with lock_lost promises nothing and is left out.
	call = rec.Begin(linearize.Purchase{Item: 1, Quantity: 1, Key: "k-3"})
	call.End(linearize.PurchaseOutcome(503, "lock_lost", 0))

	res, err := rec.Check(context.Background(), linearize.Options{Stock: map[int64]int{1: 5}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range res {
		fmt.Printf("item %d: %s (%d checked, %d of unknown outcome, %d skipped)\n",
			r.Item, r.Result, r.Checked, r.Indeterminate, r.Skipped)
	}
	fmt.Println("overall:", linearize.Overall(res))
	// Output:
	// item 1: ok (3 checked, 1 of unknown outcome, 1 skipped)
	// overall: ok
}

// A lost update: two purchases that overlap both answer remaining 4 of 5. Check writes the
// visualization of the item's history where the caller asks.
func ExampleCheck() {
	dir, err := os.MkdirTemp("", "linearize")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ops := []linearize.Operation{
		{Op: linearize.Purchase{Item: 1, Quantity: 1}, Outcome: linearize.Sold{Remaining: 4}, Call: 0, Return: 10, Ended: true},
		{Op: linearize.Purchase{Item: 1, Quantity: 1}, Outcome: linearize.Sold{Remaining: 4}, Call: 5, Return: 15, Ended: true},
	}
	res, err := linearize.Check(context.Background(), ops, linearize.Options{
		Stock:             map[int64]int{1: 5},
		VisualizationPath: func(item int64) string { return filepath.Join(dir, fmt.Sprintf("item-%d.html", item)) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res[0].Result, "-", res[0].Reason)
	fmt.Println(filepath.Base(res[0].Visualization))
	// Output:
	// illegal - no order of the 2 operations explains every answer; the longest partial order places 1
	// item-1.html
}
