package verdict

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCountsVerdictOrder(t *testing.T) {
	for _, c := range []struct {
		counts Counts
		want   string
	}{
		{Counts{}, Safe},
		{Counts{Sold: 5}, Safe},
		{Counts{Blocked: true}, Blocked},
		{Counts{Mismatches: 1, Blocked: true}, OrderMismatch},
		{Counts{LostUpdates: 1, Mismatches: 1, Blocked: true}, LostUpdate},
		{Counts{Oversold: 1, LostUpdates: 1, Mismatches: 1, Blocked: true}, Oversold},
	} {
		assert.Equal(t, c.want, c.counts.Verdict(), "%+v", c.counts)
	}
}

// TestBetween: a burst on one item is judged by what it added to the item's numbers; what the
// item showed before the burst is not the burst's doing.
func TestBetween(t *testing.T) {
	fresh := Item{ItemID: 1, InitialStock: 5, Stock: 5}
	assert.Equal(t, fresh, Fresh(Item{ItemID: 1, InitialStock: 5, Stock: -3, SoldUnits: 9, OrderCount: 9}))

	sold := Between(fresh, Item{ItemID: 1, InitialStock: 5, Stock: 2, SoldUnits: 3, OrderCount: 3})
	assert.Equal(t, Counts{Sold: 3}, sold)
	assert.Equal(t, Safe, sold.Verdict())

	// Two buyers read 1 unit, both wrote 0: two sold of one.
	over := Between(Item{InitialStock: 1, Stock: 1}, Item{InitialStock: 1, Stock: 0, SoldUnits: 2})
	assert.Equal(t, Counts{Sold: 2, Oversold: 1, LostUpdates: 1}, over)
	assert.Equal(t, Oversold, over.Verdict())

	// Two buyers read 10, both wrote 9: two sold, the stock shows one.
	lost := Between(Item{InitialStock: 10, Stock: 10}, Item{InitialStock: 10, Stock: 9, SoldUnits: 2})
	assert.Equal(t, Counts{Sold: 2, LostUpdates: 1}, lost)
	assert.Equal(t, LostUpdate, lost.Verdict())

	// Stock driven below zero is oversold even when the units sold stay within the stock.
	below := Between(Item{InitialStock: 3, Stock: 3}, Item{InitialStock: 3, Stock: -1, SoldUnits: 3})
	assert.Equal(t, 1, below.Oversold)

	// An item oversold before the burst: only what the burst added counts.
	before := Item{InitialStock: 2, Stock: 0, SoldUnits: 3}
	again := Between(before, Item{InitialStock: 2, Stock: 0, SoldUnits: 3})
	assert.Equal(t, Safe, again.Verdict())
	more := Between(before, Item{InitialStock: 2, Stock: -1, SoldUnits: 4})
	assert.Equal(t, Counts{Sold: 1, Oversold: 2}, more) // one more unit beyond the stock, one below zero
}

func TestAllRefused(t *testing.T) {
	answers := map[string]int{"lock_timeout": 5, "unavailable": 1}
	assert.True(t, AllRefused(answers, "lock_timeout", 5))
	assert.False(t, AllRefused(answers, "lock_timeout", 6))
	assert.False(t, AllRefused(answers, "lock_timeout", 4))
	assert.False(t, AllRefused(map[string]int{}, "lock_timeout", 0), "no buyer waited: nothing was refused")
}

func ok201(k string, id int64) Purchase {
	return Purchase{Key: k, ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 201, OrderID: id, Strategy: "guard"}}}
}

func keyOf(s string) *string { return &s }

func TestCheckFindsEachViolation(t *testing.T) {
	ps := []Purchase{ok201("a", 1), ok201("b", 2), ok201("c", 3),
		{Key: "d", ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 409, Code: "sold_out"}}},
		{Key: "e", ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 503, Code: "lock_lost"}}}}
	orders := []Order{
		{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: keyOf("a")},
		{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: keyOf("b")},
		// order 3 (key c) is missing
		{OrderID: 4, ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: keyOf("b")}, // duplicate
		{OrderID: 5, ItemID: 1, Quantity: 1, Strategy: "lock", IdempotencyKey: keyOf("e")},  // no 201, wrong strategy
	}
	items := []Item{{ItemID: 1, InitialStock: 3, Stock: 1, SoldUnits: 4, OrderCount: 4}}
	f := Check("guard", ps, items, orders)
	assert.Equal(t, 1, f.OversoldUnits)
	assert.Equal(t, 2, f.LostUpdates) // 3 − 1 ≠ 4
	assert.Equal(t, 1, f.DuplicateOrders)
	assert.Equal(t, 2, f.OrdersWithout201) // the duplicate and key e
	assert.Equal(t, 1, f.MissingOrders)
	assert.Equal(t, 1, f.WrongStrategy)
	assert.Equal(t, 1, f.SoldOutAnswers)
	assert.Equal(t, map[string]int{"lock_lost": 1}, f.ErrorsByCode)
	assert.Equal(t, Oversold, f.Verdict())
	assert.NotEmpty(t, f.Violations)

	safe := Check("guard", ps[:2], []Item{{ItemID: 1, InitialStock: 3, Stock: 1, SoldUnits: 2, OrderCount: 2}}, orders[:2])
	assert.Equal(t, Safe, safe.Verdict(), safe.Violations)
	lost := Check("guard", ps[:2], []Item{{ItemID: 1, InitialStock: 3, Stock: 2, SoldUnits: 2, OrderCount: 2}}, orders[:2])
	assert.Equal(t, LostUpdate, lost.Verdict())
}

// TestCheckLearnsTheStrategy: asked "" (the servers ran their own), the first answer names the
// strategy every other answer and order row must name.
func TestCheckLearnsTheStrategy(t *testing.T) {
	ps := []Purchase{ok201("a", 1), {Key: "b", ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 201, OrderID: 2, Strategy: "lock"}}}}
	orders := []Order{
		{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: keyOf("a")},
		{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "lock", IdempotencyKey: keyOf("b")},
	}
	f := Check("", ps, []Item{{ItemID: 1, InitialStock: 2, Stock: 0, SoldUnits: 2, OrderCount: 2}}, orders)
	assert.Equal(t, 2, f.WrongStrategy, f.Violations) // the answer and the order row of key b
	assert.Equal(t, OrderMismatch, f.Verdict())
}

// TestCheckWastedWorkAndTokens: the work of refused attempts is wasted, the work of sold ones
// is not; one fence token written by two transactions (batch ids) is an order mismatch.
func TestCheckWastedWorkAndTokens(t *testing.T) {
	ans := func(id int64, work float64) Answer {
		return Answer{Status: 201, OrderID: id, Strategy: "lock+guard", WorkMS: work}
	}
	ps := []Purchase{
		{Key: "a", ItemID: 1, Quantity: 1, Attempts: []Answer{ans(1, 20), {Status: 200, OrderID: 1, Strategy: "lock+guard"}}},
		{Key: "b", ItemID: 1, Quantity: 1, Attempts: []Answer{ans(2, 20)}},
		{Key: "c", ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 409, Code: "sold_out", WorkMS: 20}}},
		{Key: "d", ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 409, Code: "sold_out"}}},
		{Key: "e", ItemID: 1, Quantity: 1, Attempts: []Answer{{Status: 503, Code: "lock_lost", WorkMS: 7.5}}},
	}
	items := []Item{{ItemID: 1, InitialStock: 2, Stock: 0, SoldUnits: 2, OrderCount: 2}}
	oneBatch := []Order{
		{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard", FenceToken: 9, BatchID: 77, IdempotencyKey: keyOf("a")},
		{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "lock+guard", FenceToken: 9, BatchID: 77, IdempotencyKey: keyOf("b")},
	}
	f := Check("lock+guard", ps, items, oneBatch)
	assert.Equal(t, Safe, f.Verdict(), f.Violations)
	assert.InDelta(t, 67.5, f.WorkSpentMS, 1e-9)
	assert.InDelta(t, 27.5, f.WastedWorkMS, 1e-9)
	assert.Equal(t, 0, f.TokenRewrites)
	assert.Equal(t, 1, f.WriteTxs)
	assert.InDelta(t, 2.0, f.MeanBatch, 1e-9, "two orders in one write transaction")

	twoBatches := append([]Order(nil), oneBatch...)
	twoBatches[1].BatchID = 78
	f = Check("lock+guard", ps, items, twoBatches)
	assert.Equal(t, 1, f.TokenRewrites)
	assert.Equal(t, 2, f.WriteTxs)
	assert.Equal(t, OrderMismatch, f.Verdict())
	assert.Contains(t, strings.Join(f.Violations, "\n"), "fence token 9 written by two transactions")
}

// TestViolationsAreBounded: a run that breaks everything lists twenty violations and says
// there are more.
func TestViolationsAreBounded(t *testing.T) {
	var items []Item
	for i := range 30 {
		items = append(items, Item{ItemID: int64(i + 1), InitialStock: 1, Stock: -1})
	}
	f := Check("guard", nil, items, nil)
	assert.Len(t, f.Violations, maxViolations+1)
	assert.Equal(t, "(more violations not listed)", f.Violations[maxViolations])
	assert.Equal(t, 30, f.NegativeStock)
	assert.Equal(t, Oversold, f.Verdict())
}

// Orders of an item the stats do not list were checked against no stock: a stats mismatch,
// not SAFE (15 units sold of item 2, listed nowhere).
func TestCheckOrdersOfAnUnlistedItem(t *testing.T) {
	var ps []Purchase
	var orders []Order
	for i := range 15 {
		k := string(rune('a' + i))
		ps = append(ps, Purchase{Key: k, ItemID: 2, Quantity: 1, Attempts: []Answer{{Status: 201, OrderID: int64(i + 1), Strategy: "guard"}}})
		orders = append(orders, Order{OrderID: int64(i + 1), ItemID: 2, Quantity: 1, Strategy: "guard", IdempotencyKey: keyOf(k)})
	}
	f := Check("guard", ps, []Item{{ItemID: 1, InitialStock: 10, Stock: 10}}, orders)
	assert.Equal(t, 1, f.StatsMismatch)
	assert.Equal(t, OrderMismatch, f.Verdict(), f.Violations)
}
