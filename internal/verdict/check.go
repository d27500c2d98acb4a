package verdict

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Answer is what one HTTP purchase attempt (or replay) was told.
type Answer struct {
	Status   int     // HTTP status; 0 when no answer came
	Code     string  // error code of a refusal ("sold_out", "lock_timeout", ...)
	OrderID  int64   // the order of a 201 or 200 (an idempotent replay)
	Strategy string  // the strategy a 201 or 200 names
	WorkMS   float64 // simulated work the server spent on it (0 if unknown)
	// A cart's answer (cart.go): the lines its receipt names, and when it was sent.
	Lines []Line
	Sent  time.Time
}

// Purchase is one purchase as its client saw it: one idempotency key, the attempts sent for
// it (several when it was sent twice on purpose), then the replays of an attempt that got no
// answer.
type Purchase struct {
	Key      string
	ItemID   int64
	Quantity int
	Attempts []Answer
	Replays  []Answer
}

// Order is one order row (a row of GET /api/orders).
type Order struct {
	OrderID        int64
	ItemID         int64
	Quantity       int
	Strategy       string
	FenceToken     int64   // the lock's fencing token that wrote it (0: none)
	IdempotencyKey *string // nil: sent without one
	BatchID        int64   // the write transaction (0: unknown)
	Lines          []Line  // one per item (nil: the server does not list them)
}

// Findings is what Check learns from the servers' state and the client's own record.
type Findings struct {
	SoldUnits        int            `json:"sold_units"`         // sum of the items' sold units
	Created          int            `json:"created"`            // 201 answers
	Replayed         int            `json:"replayed"`           // 200 answers (idempotent replays)
	SoldOutAnswers   int            `json:"sold_out_answers"`   // sold_out and insufficient_stock answers
	ErrorsByCode     map[string]int `json:"errors_by_code"`     // every other failed attempt, by error code
	StatusCounts     map[string]int `json:"status_counts"`      // every attempt, by HTTP status ("0" = no answer)
	OversoldUnits    int            `json:"oversold_units"`     // sum over items of max(0, sold − initial), plus units below zero stock
	NegativeStock    int            `json:"negative_stock"`     // items whose stock is below zero
	LostUpdates      int            `json:"lost_updates"`       // sum over items of |initial − stock − sold|
	OrdersWithout201 int            `json:"orders_without_201"` // order rows no 201/200 of ours accounts for
	DuplicateOrders  int            `json:"duplicate_orders"`   // extra order rows sharing one idempotency key
	MissingOrders    int            `json:"missing_orders"`     // 201/200 answers whose order row is missing or differs
	WrongStrategy    int            `json:"wrong_strategy"`     // 201/200 answers or order rows naming another strategy
	KeyConflicts     int            `json:"key_conflicts"`      // keys answered with two different order ids
	StatsMismatch    int            `json:"stats_mismatch"`     // items whose stats disagree with their order rows
	TokenRewrites    int            `json:"token_rewrites"`     // fence tokens written by more than one transaction (batch)
	WriteTxs         int            `json:"write_transactions"` // distinct (item, batch_id) among the orders: the write transactions that sold
	MeanBatch        float64        `json:"mean_batch"`         // orders per write transaction (> 1: coalesced holds)
	// The cart and hold workloads (cart.go).
	PartialOrders    int `json:"partial_orders,omitempty"`    // orders or answers whose lines are not their cart's: a cart sold in part
	HeldUnits        int `json:"held_units,omitempty"`        // sum of the items' units in active holds after the run
	ExpiredConfirmed int `json:"expired_confirmed,omitempty"` // holds confirmed by a request sent after their expiry
	HoldMismatch     int `json:"hold_mismatch,omitempty"`     // holds whose final state disagrees with their answers
	FenceRegressions int `json:"fence_regressions,omitempty"` // lines written with an older token than an earlier line of the item
	DoubleHolds      int `json:"double_holds,omitempty"`      // holds a retry under a used key placed again (holdkeys.go)
	HoldKeys         int `json:"hold_keys,omitempty"`         // hold placements (keys) answered 201 or 200 with their hold
	ServerHolds      int `json:"server_holds,omitempty"`      // holds the servers keep after the run (0: not counted)
	StrandedUnits    int `json:"stranded_units,omitempty"`    // units of expired holds that could not be sold again
	Samples          int `json:"samples,omitempty"`           // GET /api/stats sampled during the run
	SampledOversold  int `json:"sampled_oversold,omitempty"`  // most units beyond the stock (sold + held − initial) one sample showed
	SampledLost      int `json:"sampled_lost,omitempty"`      // most units one sample showed off |initial − stock − sold − held|

	WorkSpentMS  float64  `json:"work_spent_ms"`        // simulated work the servers spent, every attempt
	WastedWorkMS float64  `json:"wasted_work_ms"`       // of it, on attempts that were then refused (no 2xx)
	Violations   []string `json:"violations,omitempty"` // one line per broken invariant
}

// Counts returns what f's verdict follows from.
func (f *Findings) Counts() Counts {
	return Counts{Sold: f.SoldUnits, Oversold: f.OversoldUnits + f.SampledOversold, LostUpdates: f.LostUpdates + f.SampledLost,
		Stranded: f.StrandedUnits,
		Mismatches: f.OrdersWithout201 + f.DuplicateOrders + f.MissingOrders + f.WrongStrategy + f.KeyConflicts + f.StatsMismatch + f.TokenRewrites +
			f.PartialOrders + f.ExpiredConfirmed + f.HoldMismatch + f.FenceRegressions + f.DoubleHolds}
}

// Verdict names the most severe broken invariant of f (Safe when none).
func (f *Findings) Verdict() string { return f.Counts().Verdict() }

// Check verifies every invariant of a run that started on a freshly reset catalogue: the
// answers (one order per key, the strategy asked), the order rows (each answered, once, as
// asked) and the items (no unit sold beyond the stock, stock down by exactly the units sold,
// stats that agree with the order rows). asked is the strategy the requests named ("" when the
// servers ran their own: then every answer must name the same one).
func Check(asked string, purchases []Purchase, items []Item, orders []Order) Findings {
	f := Findings{ErrorsByCode: map[string]int{}, StatusCounts: map[string]int{}}
	confirmed, expect := f.checkAnswers(asked, purchases)
	f.checkOrders(expect, purchases, confirmed, orders)
	f.checkStock(items, orders)
	return f
}

// checkAnswers reads the client's own record: it counts the answers, checks that every 201/200
// names the expected strategy and that one key is always answered with one order id. It
// returns that order id per key, and the expected strategy (learned from the first answer when
// asked is "").
func (f *Findings) checkAnswers(asked string, purchases []Purchase) (map[string]int64, string) {
	expect := asked
	confirmed := map[string]int64{}
	for _, p := range purchases {
		for i, r := range append(append([]Answer{}, p.Attempts...), p.Replays...) {
			replay := i >= len(p.Attempts)
			switch {
			case f.countAnswer(r, replay, &expect, "key "+p.Key):
				if id, ok := confirmed[p.Key]; ok && id != r.OrderID {
					f.KeyConflicts++
					f.violate("key %s answered with orders %d and %d", p.Key, id, r.OrderID)
				}
				confirmed[p.Key] = r.OrderID
			case replay: // a replay's error is not counted again
			case r.Code == "sold_out" || r.Code == "insufficient_stock":
				f.SoldOutAnswers++
			default:
				f.ErrorsByCode[r.Code]++
			}
		}
	}
	return confirmed, expect
}

// checkOrders checks the order rows: each accounted for by one answered key, once, with the
// expected strategy; and each answered key's order row exists and matches its request.
func (f *Findings) checkOrders(expect string, purchases []Purchase, confirmed map[string]int64, orders []Order) {
	byKey := make(map[string]*Purchase, len(purchases))
	for i := range purchases {
		byKey[purchases[i].Key] = &purchases[i]
	}
	ordersByID := make(map[int64]Order, len(orders))
	perKey := map[string]int{}
	type itemToken struct{ item, token int64 }
	batchOf := map[itemToken]int64{}
	txs := map[itemToken]bool{} // (item, batch id)
	defer func() {
		if f.WriteTxs = len(txs); f.WriteTxs > 0 {
			f.MeanBatch = float64(len(orders)) / float64(f.WriteTxs)
		}
	}()
	for _, o := range orders {
		if o.BatchID != 0 {
			txs[itemToken{o.ItemID, o.BatchID}] = true
		}
		// The strict fence: one write transaction per token (a coalesced hold's orders share
		// its token and its batch id).
		if it := (itemToken{o.ItemID, o.FenceToken}); o.FenceToken > 0 && o.BatchID != 0 {
			if b, ok := batchOf[it]; ok && b != o.BatchID {
				f.TokenRewrites++
				f.violate("item %d: fence token %d written by two transactions (order %d)", o.ItemID, o.FenceToken, o.OrderID)
			}
			batchOf[it] = o.BatchID
		}
		ordersByID[o.OrderID] = o
		if expect != "" && o.Strategy != expect {
			f.WrongStrategy++
			f.violate("order %d has strategy %q, asked %q", o.OrderID, o.Strategy, expect)
		}
		if o.IdempotencyKey == nil {
			f.OrdersWithout201++
			f.violate("order %d has no idempotency key (every purchase of the run sends one)", o.OrderID)
			continue
		}
		key := *o.IdempotencyKey
		perKey[key]++
		if perKey[key] > 1 {
			f.DuplicateOrders++
			f.violate("key %s has %d orders", key, perKey[key])
		}
		if id, ok := confirmed[key]; !ok || id != o.OrderID {
			f.OrdersWithout201++
			f.violate("order %d (key %s) was never answered 201 or replayed", o.OrderID, key)
		}
	}
	for key, id := range confirmed {
		o, ok := ordersByID[id]
		p := byKey[key]
		switch {
		case !ok:
			f.MissingOrders++
			f.violate("key %s was answered with order %d, which does not exist", key, id)
		case o.IdempotencyKey == nil || *o.IdempotencyKey != key || o.ItemID != p.ItemID || o.Quantity != p.Quantity:
			f.MissingOrders++
			f.violate("order %d does not match its answer (key %s, item %d, quantity %d)", id, key, p.ItemID, p.Quantity)
		}
	}
}

// checkStock checks every item: stock not below zero, no unit sold beyond the initial stock,
// stock down by exactly the units sold, and stats that agree with the order rows.
func (f *Findings) checkStock(items []Item, orders []Order) {
	soldByItem := map[int64]int{}
	countByItem := map[int64]int{}
	for _, o := range orders {
		soldByItem[o.ItemID] += o.Quantity
		countByItem[o.ItemID]++
	}
	sorted := append([]Item(nil), items...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ItemID < sorted[j].ItemID })
	for _, s := range sorted {
		f.SoldUnits += s.SoldUnits
		if s.Stock < 0 {
			f.NegativeStock++
			f.OversoldUnits += -s.Stock
			f.violate("item %d: stock is %d", s.ItemID, s.Stock)
		}
		if over := s.SoldUnits - s.InitialStock; over > 0 {
			f.OversoldUnits += over
			f.violate("item %d: %d units sold of %d (%d oversold)", s.ItemID, s.SoldUnits, s.InitialStock, over)
		}
		if lost := s.InitialStock - s.Stock - s.SoldUnits; lost != 0 {
			f.LostUpdates += abs(lost)
			f.violate("item %d: stock went %d -> %d but %d units were sold (lost update)", s.ItemID, s.InitialStock, s.Stock, s.SoldUnits)
		}
		if s.SoldUnits != soldByItem[s.ItemID] || s.OrderCount != countByItem[s.ItemID] {
			f.StatsMismatch++
			f.violate("item %d: stats say %d units in %d orders, the order rows %d in %d", s.ItemID,
				s.SoldUnits, s.OrderCount, soldByItem[s.ItemID], countByItem[s.ItemID])
		}
	}
	f.checkListed(items, soldByItem)
}

// checkListed counts as a stats mismatch every item that order rows sold (sold: units by
// item) and the stats do not list: its units were checked against no stock.
func (f *Findings) checkListed(items []Item, sold map[int64]int) {
	listed := make(map[int64]bool, len(items))
	for _, s := range items {
		listed[s.ItemID] = true
	}
	var unlisted []int64
	for id := range sold {
		if !listed[id] {
			unlisted = append(unlisted, id)
		}
	}
	slices.Sort(unlisted)
	for _, id := range unlisted {
		f.StatsMismatch++
		f.violate("item %d: the orders sold %d units of it, and the stats do not list it", id, sold[id])
	}
}

// countAnswer counts one answer (an attempt, or a replay when replay) in f: its status, the work
// it spent (wasted unless 2xx), and for a 2xx whether it created or replayed an order and that
// it names the expected strategy (learned from the first 2xx when *expect is ""); what names
// the request in a violation. It reports whether the answer was a 2xx (201 or 200).
func (f *Findings) countAnswer(r Answer, replay bool, expect *string, what string) bool {
	if !replay {
		f.StatusCounts[fmt.Sprint(r.Status)]++
	}
	f.WorkSpentMS += r.WorkMS
	if r.Status != 201 && r.Status != 200 {
		if r.Status < 200 || r.Status > 299 {
			f.WastedWorkMS += r.WorkMS
		}
		return false
	}
	if r.Status == 201 {
		f.Created++
	} else {
		f.Replayed++
	}
	if *expect == "" {
		*expect = r.Strategy
	}
	if r.Strategy != *expect {
		f.WrongStrategy++
		f.violate("%s: answer %d names strategy %q, asked %q", what, r.Status, r.Strategy, *expect)
	}
	return true
}
