package verdict

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Line is one line of a cart or a hold, merged per item: Quantity units of item ItemID. In an
// answer, Remaining is the item's stock right after the write and FenceToken the lock token
// that wrote it (0: none).
type Line struct {
	ItemID     int64
	Quantity   int
	Remaining  int
	FenceToken int64
}

// Cart is one checkout (POST /api/checkout) as its client saw it: one idempotency key, its
// lines (merged per item, ascending by item), the attempts sent for it and the replays of an
// attempt that got no answer. A 201 or 200 answer names its order and its lines.
type Cart struct {
	Key      string
	Lines    []Line
	Attempts []Answer
	Replays  []Answer
}

// Hold is one stock hold (POST /api/holds) its client placed (a 201 named it).
type Hold struct {
	ID        int64
	Lines     []Line    // merged per item, ascending
	ExpiresAt time.Time // the 201's expires_at
	// Confirms are the confirmation attempts (POST /api/holds/:id/confirm): a 201 or 200
	// names the order and its lines; Sent is when each was sent.
	Confirms  []Answer
	Cancelled bool   // a DELETE /api/holds/:id was answered 204
	Status    string // the hold's status as GET /api/holds/:id showed it after the run ("": not read)
	OrderID   int64  // the order GET /api/holds/:id showed
}

// Resale is what the client learned when it bought back, once every hold had expired, the
// units each item should have left (its initial stock − its sold units): what was refused,
// and the items after it.
type Resale struct {
	Refused []string // one line per checkout of the resale not answered 201
	Items   []Item   // GET /api/stats after the resale
}

// CartRun is one run of the cart or hold workload, as CheckCarts judges it.
type CartRun struct {
	Asked        string   // the strategy the checkouts named ("" when the servers ran their own)
	HoldStrategy string   // the strategy the holds named
	Carts        []Cart   // the checkouts
	Holds        []Hold   // the holds placed (answered 201)
	Items        []Item   // GET /api/stats after the run
	Orders       []Order  // GET /api/orders after the run
	Samples      [][]Item // GET /api/stats sampled during the run
	Resale       *Resale  // the hold workload's resale of the expired holds' units (nil: none)
	// HoldKeys are every hold placement (answered or not) with its key; ServerHolds the holds
	// the servers keep after the run (nil: not counted). See checkHoldKeys.
	HoldKeys    []HoldKey
	ServerHolds *ServerHolds
}

// expiryTolerance is how much later than a hold's expiry a confirmation may have been sent and
// still be accepted: the server's and the client's clocks are one clock (one machine), read at
// millisecond precision.
const expiryTolerance = 2 * time.Millisecond

// CheckCarts verifies every invariant of a cart or hold run that started on a freshly reset
// catalogue (docs/DESIGN.md §12):
//   - an order has all its lines or does not exist: every answered checkout or confirmation
//     names its cart's lines, its order exists and holds exactly them, and no order exists that
//     no answer accounts for;
//   - for every item, initial − stock = the units of its order lines + the units of its active
//     holds, and sold + held ≤ initial (never below zero stock), after the run and in every
//     sample taken during it;
//   - the lines of an item, in the order they were written, carry non-decreasing fencing
//     tokens (a stale holder's write was refused);
//   - no hold was confirmed by a request sent after its expiry, and every hold ends as its
//     answers say;
//   - every expired hold's units were sold again (Resale);
//   - no retry under a hold's key held twice: one hold per key, and the servers keep as many
//     holds as keys were answered (HoldKeys, ServerHolds).
func CheckCarts(run CartRun) Findings {
	f := Findings{ErrorsByCode: map[string]int{}, StatusCounts: map[string]int{}}
	// The orders every answer accounts for: by key (checkouts) and by hold.
	want := map[int64]wantOrder{}
	byKey := f.checkCartAnswers(run, want)
	f.checkHolds(run.Holds, run.HoldStrategy, want)
	if run.HoldKeys != nil {
		f.checkHoldKeys(run.HoldKeys, run.ServerHolds)
	}
	f.checkCartOrders(run, want, byKey)
	f.checkHeld(run.Items, run.Orders, want)
	for _, sample := range run.Samples {
		f.checkSample(sample)
	}
	f.Samples = len(run.Samples)
	if run.Resale != nil {
		f.checkResale(run.Resale)
	}
	return f
}

// wantOrder is an order some answer promised: its lines and strategy, and who promised it.
type wantOrder struct {
	lines    []Line
	strategy string
	key      string // the checkout's key ("" for a hold's order)
	hold     int64  // the hold it confirmed (0 for a checkout)
}

// sameLines reports whether two merged carts have the same items and quantities.
func sameLines(a, b []Line) bool {
	return slices.EqualFunc(a, b, func(x, y Line) bool { return x.ItemID == y.ItemID && x.Quantity == y.Quantity })
}

func describeLines(ls []Line) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%dx%d", l.ItemID, l.Quantity)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checkCartAnswers counts the checkouts' answers and checks each 2xx: the strategy asked, one
// order per key, every line of the cart. It fills want with the orders promised and returns
// the carts by key.
func (f *Findings) checkCartAnswers(run CartRun, want map[int64]wantOrder) map[string]*Cart {
	expect := run.Asked
	byKey := make(map[string]*Cart, len(run.Carts))
	confirmed := map[string]int64{}
	for i := range run.Carts {
		c := &run.Carts[i]
		byKey[c.Key] = c
		for j, r := range append(append([]Answer{}, c.Attempts...), c.Replays...) {
			replay := j >= len(c.Attempts)
			switch {
			case f.countAnswer(r, replay, &expect, "cart "+c.Key):
				if !sameLines(r.Lines, c.Lines) {
					f.PartialOrders++
					f.violate("cart %s %s was answered %d with the lines %s", c.Key, describeLines(c.Lines), r.Status, describeLines(r.Lines))
				}
				if id, ok := confirmed[c.Key]; ok && id != r.OrderID {
					f.KeyConflicts++
					f.violate("cart %s answered with orders %d and %d", c.Key, id, r.OrderID)
				}
				confirmed[c.Key] = r.OrderID
				want[r.OrderID] = wantOrder{lines: c.Lines, strategy: expect, key: c.Key}
			case replay:
			case r.Code == "sold_out" || r.Code == "insufficient_stock":
				f.SoldOutAnswers++
			default:
				f.ErrorsByCode[r.Code]++
			}
		}
	}
	return byKey
}

// checkHolds checks every hold's confirmations against its expiry and its final state
// against its answers, and fills want with the orders of the confirmed ones.
func (f *Findings) checkHolds(holds []Hold, strategy string, want map[int64]wantOrder) {
	for _, h := range holds {
		var order int64
		expired := false
		for _, r := range h.Confirms {
			f.StatusCounts[fmt.Sprint(r.Status)]++
			switch {
			case r.Status == 201 || r.Status == 200:
				if r.Status == 201 {
					f.Created++
				} else {
					f.Replayed++
				}
				// A 200 replays a confirmation made before; a 201 is this request's own.
				if r.Status == 201 && !r.Sent.IsZero() && r.Sent.After(h.ExpiresAt.Add(expiryTolerance)) {
					f.ExpiredConfirmed++
					f.violate("hold %d (expiring at %s) was confirmed by a request sent %s after its expiry",
						h.ID, h.ExpiresAt.Format("15:04:05.000"), r.Sent.Sub(h.ExpiresAt).Round(time.Millisecond))
				}
				if !sameLines(r.Lines, h.Lines) {
					f.PartialOrders++
					f.violate("hold %d %s was confirmed with the lines %s", h.ID, describeLines(h.Lines), describeLines(r.Lines))
				}
				if order != 0 && order != r.OrderID {
					f.KeyConflicts++
					f.violate("hold %d confirmed as orders %d and %d", h.ID, order, r.OrderID)
				}
				order = r.OrderID
				want[order] = wantOrder{lines: h.Lines, strategy: strategy, hold: h.ID}
			case r.Code == "hold_expired":
				expired = true
			default:
				f.ErrorsByCode[r.Code]++
			}
		}
		if h.Status == "" {
			continue
		}
		bad := ""
		switch {
		case order != 0 && (h.Status != "confirmed" || h.OrderID != order):
			bad = fmt.Sprintf("confirmed as order %d, shows %s (order %d)", order, h.Status, h.OrderID)
		case order == 0 && h.Status == "confirmed" && !unanswered(h.Confirms):
			bad = fmt.Sprintf("never confirmed, shows confirmed (order %d)", h.OrderID)
		case expired && h.Status != "expired":
			bad = "answered hold_expired, shows " + h.Status
		case h.Cancelled && order == 0 && h.Status != "cancelled" && h.Status != "expired":
			bad = "cancelled, shows " + h.Status
		case order == 0 && !h.Cancelled && len(h.Confirms) == 0 && h.Status != "expired" && h.Status != "active":
			bad = "left to expire, shows " + h.Status
		}
		if bad != "" {
			f.HoldMismatch++
			f.violate("hold %d: %s", h.ID, bad)
		}
	}
}

// unanswered reports whether some answer of rs never came (its request may have taken effect).
func unanswered(rs []Answer) bool {
	for _, r := range rs {
		if r.Status == 0 || r.Status >= 500 {
			return true
		}
	}
	return false
}

// checkCartOrders checks the order rows: each promised by one answer, with its strategy and
// all its lines (the rows' lines when the server lists them, else their total), and each
// promised order present.
func (f *Findings) checkCartOrders(run CartRun, want map[int64]wantOrder, byKey map[string]*Cart) {
	seen := map[int64]bool{}
	perKey := map[string]int{}
	for _, o := range run.Orders {
		seen[o.OrderID] = true
		w, ok := want[o.OrderID]
		if o.IdempotencyKey != nil {
			key := *o.IdempotencyKey
			if perKey[key]++; perKey[key] > 1 {
				f.DuplicateOrders++
				f.violate("key %s has %d orders", key, perKey[key])
			}
			if !ok || w.key != key {
				f.OrdersWithout201++
				f.violate("order %d (key %s) was never answered 201 or replayed", o.OrderID, key)
				if c := byKey[key]; c != nil && !ok {
					w = wantOrder{lines: c.Lines, key: key} // its lines are still known: check them
					ok = true
				}
			}
		} else if !ok || w.hold == 0 {
			f.OrdersWithout201++
			f.violate("order %d has no idempotency key and confirms none of the run's holds", o.OrderID)
		}
		if !ok {
			continue
		}
		if w.strategy != "" && o.Strategy != w.strategy {
			f.WrongStrategy++
			f.violate("order %d has strategy %q, asked %q", o.OrderID, o.Strategy, w.strategy)
		}
		total := 0
		for _, l := range w.lines {
			total += l.Quantity
		}
		switch {
		case o.Lines != nil && !sameLines(o.Lines, w.lines):
			f.PartialOrders++
			f.violate("order %d has the lines %s, its cart %s", o.OrderID, describeLines(o.Lines), describeLines(w.lines))
		case o.Quantity != total:
			f.PartialOrders++
			f.violate("order %d has %d units, its cart %s %d", o.OrderID, o.Quantity, describeLines(w.lines), total)
		}
	}
	ids := make([]int64, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !seen[id] {
			f.MissingOrders++
			f.violate("order %d (%s) was answered but does not exist", id, describeWant(want[id]))
		}
	}
}

func describeWant(w wantOrder) string {
	if w.hold != 0 {
		return fmt.Sprintf("hold %d", w.hold)
	}
	return "key " + w.key
}

// checkHeld checks every item after the run: stock not below zero, sold + held ≤ initial,
// initial − stock = sold + held, stats that agree with the order lines, and the fencing
// tokens of its lines in the order they were written.
func (f *Findings) checkHeld(items []Item, orders []Order, want map[int64]wantOrder) {
	sold, count := map[int64]int{}, map[int64]int{}
	type written struct {
		order, token int64
	}
	tokens := map[int64][]written{}
	for _, o := range orders {
		lines := o.Lines
		if lines == nil {
			lines = want[o.OrderID].lines // the server does not list them: the answer's
		}
		if lines == nil && o.ItemID != 0 {
			lines = []Line{{ItemID: o.ItemID, Quantity: o.Quantity, FenceToken: o.FenceToken}}
		}
		for _, l := range lines {
			sold[l.ItemID] += l.Quantity
			count[l.ItemID]++
			// A confirmed hold's order is inserted at its confirmation, but its lines' units
			// (and tokens) were written when the hold was placed: its order id does not say
			// when the item's row was written, so it is left out of the write order.
			if l.FenceToken > 0 && want[o.OrderID].hold == 0 {
				tokens[l.ItemID] = append(tokens[l.ItemID], written{o.OrderID, l.FenceToken})
			}
		}
	}
	sorted := append([]Item(nil), items...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ItemID < sorted[j].ItemID })
	for _, s := range sorted {
		f.SoldUnits += s.SoldUnits
		f.HeldUnits += s.HeldUnits
		if s.Stock < 0 {
			f.NegativeStock++
			f.OversoldUnits += -s.Stock
			f.violate("item %d: stock is %d", s.ItemID, s.Stock)
		}
		if over := s.SoldUnits + s.HeldUnits - s.InitialStock; over > 0 {
			f.OversoldUnits += over
			f.violate("item %d: %d units sold and %d held of %d (%d oversold)", s.ItemID, s.SoldUnits, s.HeldUnits, s.InitialStock, over)
		}
		if lost := s.InitialStock - s.Stock - s.SoldUnits - s.HeldUnits; lost != 0 {
			f.LostUpdates += abs(lost)
			f.violate("item %d: stock went %d -> %d but %d units were sold and %d are held (lost update)",
				s.ItemID, s.InitialStock, s.Stock, s.SoldUnits, s.HeldUnits)
		}
		if s.SoldUnits != sold[s.ItemID] || s.OrderCount != count[s.ItemID] {
			f.StatsMismatch++
			f.violate("item %d: stats say %d units in %d order lines, the orders %d in %d", s.ItemID,
				s.SoldUnits, s.OrderCount, sold[s.ItemID], count[s.ItemID])
		}
	}
	f.checkListed(items, sold)
	// Order ids of one item follow its writes: every write of an item takes the item's row
	// lock before it inserts its order.
	items2 := make([]int64, 0, len(tokens))
	for id := range tokens {
		items2 = append(items2, id)
	}
	slices.Sort(items2)
	for _, id := range items2 {
		ws := tokens[id]
		sort.Slice(ws, func(i, j int) bool { return ws[i].order < ws[j].order })
		var newest written
		for _, w := range ws {
			if w.token < newest.token {
				f.FenceRegressions++
				f.violate("item %d: order %d was written with token %d after order %d with token %d (a stale holder's write)",
					id, w.order, w.token, newest.order, newest.token)
			}
			if w.token > newest.token {
				newest = w
			}
		}
	}
}

// checkSample checks one sample of GET /api/stats taken during the run.
func (f *Findings) checkSample(items []Item) {
	over, lost := 0, 0
	for _, s := range items {
		over += max(0, s.SoldUnits+s.HeldUnits-s.InitialStock) + max(0, -s.Stock)
		lost += abs(s.InitialStock - s.Stock - s.SoldUnits - s.HeldUnits)
	}
	if over > f.SampledOversold {
		f.violate("during the run a sample showed %d units sold or held beyond the stock", over)
		f.SampledOversold = over
	}
	if lost > f.SampledLost {
		f.violate("during the run a sample showed %d units off initial − stock = sold + held", lost)
		f.SampledLost = lost
	}
}

// checkResale checks that every item's units were sold again once every hold had expired:
// nothing held, nothing left in stock, every unit sold, and no checkout of the resale refused.
func (f *Findings) checkResale(r *Resale) {
	for _, line := range r.Refused {
		f.violate("expired holds' units not sellable again: %s", line)
	}
	for _, s := range r.Items {
		if left := s.InitialStock - s.SoldUnits; s.HeldUnits > 0 || s.Stock != 0 || left != 0 {
			f.StrandedUnits += max(s.HeldUnits, s.Stock, abs(left))
			f.violate("item %d after every hold expired and the rest was bought: stock %d, %d held, %d of %d sold",
				s.ItemID, s.Stock, s.HeldUnits, s.SoldUnits, s.InitialStock)
		}
	}
	if len(r.Refused) > 0 && f.StrandedUnits == 0 {
		f.StrandedUnits = len(r.Refused)
	}
}
