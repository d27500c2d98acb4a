package verdict

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// cartRun is a safe run: one cart of items 1 and 2 sold, one hold of item 1 confirmed in
// time, one hold of item 2 still active; every number agrees.
func cartRun() CartRun {
	key := "k1"
	exp := time.Date(2026, 1, 1, 12, 0, 1, 0, time.UTC)
	cart := []Line{{ItemID: 1, Quantity: 2}, {ItemID: 2, Quantity: 1}}
	held := []Line{{ItemID: 1, Quantity: 1}}
	return CartRun{
		Asked: "guard", HoldStrategy: "guard",
		Carts: []Cart{{Key: key, Lines: cart, Attempts: []Answer{{Status: 201, OrderID: 10, Strategy: "guard",
			Lines: []Line{{ItemID: 1, Quantity: 2, Remaining: 8}, {ItemID: 2, Quantity: 1, Remaining: 9}}}}}},
		Holds: []Hold{
			{ID: 5, Lines: held, ExpiresAt: exp, Status: "confirmed", OrderID: 11,
				Confirms: []Answer{{Status: 201, OrderID: 11, Strategy: "guard", Lines: held, Sent: exp.Add(-time.Second)}}},
			{ID: 6, Lines: []Line{{ItemID: 2, Quantity: 3}}, ExpiresAt: exp, Status: "active"},
		},
		Items: []Item{
			{ItemID: 1, InitialStock: 10, Stock: 7, SoldUnits: 3, OrderCount: 2},
			{ItemID: 2, InitialStock: 10, Stock: 6, SoldUnits: 1, OrderCount: 1, HeldUnits: 3},
		},
		Orders: []Order{
			{OrderID: 10, Quantity: 3, Strategy: "guard", IdempotencyKey: &key},
			{OrderID: 11, ItemID: 1, Quantity: 1, Strategy: "guard"},
		},
	}
}

func TestCheckCartsSafe(t *testing.T) {
	f := CheckCarts(cartRun())
	assert.Equal(t, Safe, f.Verdict(), "%v", f.Violations)
	assert.Empty(t, f.Violations)
	assert.Equal(t, 4, f.SoldUnits)
	assert.Equal(t, 3, f.HeldUnits)
}

// Each broken invariant is named by its own count and breaks the verdict.
func TestCheckCartsBroken(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(r *CartRun)
		count func(f Findings) int
		want  string
	}{
		{"an answer without one of its lines", func(r *CartRun) {
			r.Carts[0].Attempts[0].Lines = r.Carts[0].Attempts[0].Lines[:1]
		}, func(f Findings) int { return f.PartialOrders }, OrderMismatch},
		{"an order row with part of its lines", func(r *CartRun) {
			r.Orders[0].Lines = []Line{{ItemID: 1, Quantity: 2}}
		}, func(f Findings) int { return f.PartialOrders }, OrderMismatch},
		{"a line missing from the stats", func(r *CartRun) {
			r.Items[1].SoldUnits, r.Items[1].OrderCount, r.Items[1].Stock = 0, 0, 7
		}, func(f Findings) int { return f.StatsMismatch }, OrderMismatch},
		{"held units the stock does not show", func(r *CartRun) {
			r.Items[1].Stock = 9
		}, func(f Findings) int { return f.LostUpdates }, LostUpdate},
		{"sold + held beyond the stock", func(r *CartRun) {
			r.Items[1].HeldUnits, r.Items[1].Stock = 10, -1
		}, func(f Findings) int { return f.OversoldUnits }, Oversold},
		{"a sample oversold during the run", func(r *CartRun) {
			r.Samples = [][]Item{{{ItemID: 1, InitialStock: 10, Stock: 0, SoldUnits: 9, HeldUnits: 2}}}
		}, func(f Findings) int { return f.SampledOversold }, Oversold},
		{"a hold confirmed after its expiry", func(r *CartRun) {
			r.Holds[0].Confirms[0].Sent = r.Holds[0].ExpiresAt.Add(50 * time.Millisecond)
		}, func(f Findings) int { return f.ExpiredConfirmed }, OrderMismatch},
		{"a hold answered expired that shows confirmed", func(r *CartRun) {
			r.Holds[1].Confirms = []Answer{{Status: 410, Code: "hold_expired"}}
			r.Holds[1].Status = "confirmed"
		}, func(f Findings) int { return f.HoldMismatch }, OrderMismatch},
		{"an order nobody was answered", func(r *CartRun) {
			r.Orders = append(r.Orders, Order{OrderID: 12, ItemID: 2, Quantity: 1, Strategy: "guard"})
		}, func(f Findings) int { return f.OrdersWithout201 }, OrderMismatch},
		{"a stale token written after a newer one", func(r *CartRun) {
			// A second cart, written after the first (a greater order id) with an older token.
			k2 := "k2"
			r.Carts = append(r.Carts, Cart{Key: k2, Lines: []Line{{ItemID: 1, Quantity: 1}}, Attempts: []Answer{{Status: 201, OrderID: 12,
				Strategy: "guard", Lines: []Line{{ItemID: 1, Quantity: 1, Remaining: 6}}}}})
			r.Orders[0].Lines = []Line{{ItemID: 1, Quantity: 2, FenceToken: 9}, {ItemID: 2, Quantity: 1, FenceToken: 4}}
			r.Orders = append(r.Orders, Order{OrderID: 12, ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: &k2,
				Lines: []Line{{ItemID: 1, Quantity: 1, FenceToken: 8}}})
			r.Items[0].Stock, r.Items[0].SoldUnits, r.Items[0].OrderCount = 6, 4, 3
		}, func(f Findings) int { return f.FenceRegressions }, OrderMismatch},
		{"expired holds' units not sellable again", func(r *CartRun) {
			r.Resale = &Resale{Refused: []string{"item 2: 9 units refused"},
				Items: []Item{{ItemID: 2, InitialStock: 10, Stock: 3, SoldUnits: 7}}}
		}, func(f Findings) int { return f.StrandedUnits }, Stranded},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := cartRun()
			c.edit(&r)
			f := CheckCarts(r)
			assert.Positive(t, c.count(f), "%v", f.Violations)
			assert.Equal(t, c.want, f.Verdict(), "%v", f.Violations)
			assert.NotEmpty(t, f.Violations)
		})
	}
}

// A confirmed hold's order is inserted at its confirmation, after orders written since the hold
// was placed, but its units and token were written at the placement: an older token on a later
// order id is no regression.
func TestCheckCartsHoldOrderOutOfWriteOrder(t *testing.T) {
	r := cartRun()
	r.Orders[0].Lines = []Line{{ItemID: 1, Quantity: 2, FenceToken: 9}, {ItemID: 2, Quantity: 1, FenceToken: 4}}
	r.Orders[1].Lines = []Line{{ItemID: 1, Quantity: 1, FenceToken: 3}}
	f := CheckCarts(r)
	assert.Equal(t, Safe, f.Verdict(), "%v", f.Violations)
	assert.Zero(t, f.FenceRegressions)
}

func TestCheckCartsResaleSafe(t *testing.T) {
	r := cartRun()
	r.Resale = &Resale{Items: []Item{{ItemID: 1, InitialStock: 10, SoldUnits: 10}, {ItemID: 2, InitialStock: 10, SoldUnits: 10}}}
	f := CheckCarts(r)
	assert.Equal(t, Safe, f.Verdict(), "%v", f.Violations)
}

// A confirmation replayed after the expiry (200: the hold was confirmed before it) is not a
// confirmed expired hold.
func TestCheckCartsReplayedConfirmAfterExpiry(t *testing.T) {
	r := cartRun()
	h := &r.Holds[0]
	h.Confirms = append(h.Confirms, Answer{Status: 200, OrderID: 11, Strategy: "guard", Lines: h.Lines, Sent: h.ExpiresAt.Add(time.Second)})
	f := CheckCarts(r)
	assert.Equal(t, Safe, f.Verdict(), "%v", f.Violations)
	assert.Zero(t, f.ExpiredConfirmed)
}

// A cart's units of an item the stats do not list are a stats mismatch, as for purchases.
func TestCheckCartsUnlistedItem(t *testing.T) {
	r := cartRun()
	r.Items = r.Items[:1] // item 2, which the cart and a hold sold from, is not listed
	f := CheckCarts(r)
	assert.Equal(t, 1, f.StatsMismatch, "%v", f.Violations)
	assert.NotEqual(t, Safe, f.Verdict())
}
