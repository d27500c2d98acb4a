package workload

import (
	"context"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// The lock-wait classes of a cart workload's requests (lockClass), in report order.
const (
	ClassSingle   = "single"    // a single purchase of the hot item (-cart-singles)
	ClassHot      = "hot"       // a cart whose one item is the hot item
	ClassHotOther = "hot+other" // a cart of the hot item and at least one other item: two locks or more
	ClassCold     = "cold"      // a cart without the hot item
)

// LockClasses are the classes in report order.
var LockClasses = []string{ClassSingle, ClassHot, ClassHotOther, ClassCold}

// lockClass is the class of a request for the merged lines of a cart (single: a single
// purchase) where hot is the hot item.
func lockClass(merged []client.CartLine, hot int64, single bool) string {
	switch {
	case single:
		return ClassSingle
	case !hasItem(merged, hot):
		return ClassCold
	case len(merged) == 1:
		return ClassHot
	}
	return ClassHotOther
}

// LockWait is the servers' wait for the locks, as each answer's Server-Timing lock;dur told it,
// over the requests of one class: checkouts, single purchases and hold placements (a hold's
// confirmation takes no lock).
type LockWait struct {
	Class      string  `json:"class"`
	Answers    int     `json:"answers"`    // answers with a Server-Timing header
	Unanswered int     `json:"unanswered"` // requests without an HTTP answer (their wait is unknown)
	MaxMS      float64 `json:"max_ms"`     // the longest wait
	MeanMS     float64 `json:"mean_ms"`
}

// lockWaits measures the lock waits of every class from the client's record.
func (w *Workload) lockWaits() []LockWait {
	by := make(map[string]*LockWait, len(LockClasses))
	out := make([]LockWait, len(LockClasses))
	for i, c := range LockClasses {
		out[i].Class = c
		by[c] = &out[i]
	}
	add := func(class string, r client.CartResult) {
		lw := by[class]
		if r.Status == 0 {
			lw.Unanswered++
			return
		}
		lw.Answers++
		lw.MeanMS += r.LockMS
		lw.MaxMS = max(lw.MaxMS, r.LockMS)
	}
	hot := w.items[0].ID
	for _, c := range w.cartList {
		for _, r := range c.Attempts {
			add(c.Class, r)
		}
	}
	for _, h := range w.holdList {
		add(lockClass(h.Merged, hot, false), h.Place)
	}
	for i := range out {
		if out[i].Answers > 0 {
			out[i].MeanMS /= float64(out[i].Answers)
		}
	}
	return out
}

// The series of stockguard_hold_carts (docs/DESIGN.md §10.3): the carts each coalesced hold of
// lock+guard served at its anchor item.
const (
	holdCartsSum   = "stockguard_hold_carts_sum"
	holdCartsCount = "stockguard_hold_carts_count"
	holdCartsNone  = `stockguard_hold_carts_bucket{le="0"}`
)

// HoldCarts is stockguard_hold_carts summed over the instances at one instant.
type HoldCarts struct {
	Carts, Holds, Empty float64 // carts served, holds, holds that served no cart
}

// ScrapeHoldCarts reads stockguard_hold_carts from every instance's /metrics and sums them;
// ok is false when an instance could not be read or has no such series (a strategy's run is
// then reported without carts per hold).
func ScrapeHoldCarts(ctx context.Context, apis []*client.API) (h HoldCarts, ok bool) {
	for _, a := range apis {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := a.Metrics(cctx, holdCartsSum, holdCartsCount, holdCartsNone)
		cancel()
		if err != nil || len(m) != 3 {
			return HoldCarts{}, false
		}
		h.Carts += m[holdCartsSum]
		h.Holds += m[holdCartsCount]
		h.Empty += m[holdCartsNone]
	}
	return h, true
}

// SetHolds fills the holds' figures from stockguard_hold_carts read before and after the run.
func (f *CartFigures) SetHolds(before, after HoldCarts) {
	d := HoldCarts{Carts: after.Carts - before.Carts, Holds: after.Holds - before.Holds, Empty: after.Empty - before.Empty}
	f.Coalesced = &HoldFigures{Holds: int(d.Holds), CartHolds: int(d.Holds - d.Empty), Carts: int(d.Carts)}
	if d.Holds > 0 {
		f.Coalesced.CartsPerHold = d.Carts / d.Holds
	}
	if d.Holds > d.Empty {
		f.Coalesced.CartsPerCartHold = d.Carts / (d.Holds - d.Empty)
	}
}

// HoldFigures are the coalesced holds of a run (stockguard_hold_carts, read from every
// instance before and after it): lock+guard's; a strategy without a coalesced hold has none.
type HoldFigures struct {
	Holds            int     `json:"holds"`               // coalesced holds, of any item
	CartHolds        int     `json:"cart_holds"`          // of them, holds that served at least one cart
	Carts            int     `json:"carts"`               // carts (checkouts, hold placements) they served
	CartsPerHold     float64 `json:"carts_per_hold"`      // Carts / Holds: the mean carts per hold
	CartsPerCartHold float64 `json:"carts_per_cart_hold"` // Carts / CartHolds
}
