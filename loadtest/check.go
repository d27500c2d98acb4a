package main

import (
	"fmt"
	"sort"
)

// Verdicts, most severe first.
const (
	VerdictOversold      = "OVERSOLD"
	VerdictLostUpdate    = "LOST UPDATE"
	VerdictOrderMismatch = "ORDER MISMATCH"
	VerdictSafe          = "SAFE"
)

// findings is what check learns from the servers' state and the client's own record.
type findings struct {
	SoldUnits        int            `json:"sold_units"`           // sum of sold_units of /api/stats
	Created          int            `json:"created"`              // 201 answers
	Replayed         int            `json:"replayed"`             // 200 answers (idempotent replays)
	SoldOutAnswers   int            `json:"sold_out_answers"`     // sold_out and insufficient_stock answers
	ErrorsByCode     map[string]int `json:"errors_by_code"`       // every other failed attempt, by error code
	StatusCounts     map[string]int `json:"status_counts"`        // every attempt, by HTTP status ("0" = no answer)
	OversoldUnits    int            `json:"oversold_units"`       // sum over items of max(0, sold − initial), plus units below zero stock
	NegativeStock    int            `json:"negative_stock"`       // items whose stock is below zero
	LostUpdates      int            `json:"lost_updates"`         // sum over items of |initial − stock − sold|
	OrdersWithout201 int            `json:"orders_without_201"`   // order rows no 201/200 of ours accounts for
	DuplicateOrders  int            `json:"duplicate_orders"`     // extra order rows sharing one idempotency key
	MissingOrders    int            `json:"missing_orders"`       // 201/200 answers whose order row is missing or differs
	WrongStrategy    int            `json:"wrong_strategy"`       // 201/200 answers or order rows naming another strategy
	KeyConflicts     int            `json:"key_conflicts"`        // keys answered with two different order ids
	StatsMismatch    int            `json:"stats_mismatch"`       // items whose stats disagree with their order rows
	TokenRewrites    int            `json:"token_rewrites"`       // fence tokens written by more than one transaction (batch)
	WriteTxs         int            `json:"write_transactions"`   // distinct (item, batch_id) among the orders: the write transactions that sold
	MeanBatch        float64        `json:"mean_batch"`           // orders per write transaction (> 1: coalesced holds)
	WorkSpentMS      float64        `json:"work_spent_ms"`        // simulated work the servers spent (Server-Timing), every attempt
	WastedWorkMS     float64        `json:"wasted_work_ms"`       // of it, on attempts that were then refused (no 2xx)
	Violations       []string       `json:"violations,omitempty"` // one line per broken invariant
}

// verdict names the most severe broken invariant.
func (f *findings) verdict() string {
	switch {
	case f.OversoldUnits > 0 || f.NegativeStock > 0:
		return VerdictOversold
	case f.LostUpdates > 0:
		return VerdictLostUpdate
	case f.OrdersWithout201+f.DuplicateOrders+f.MissingOrders+f.WrongStrategy+f.KeyConflicts+f.StatsMismatch+f.TokenRewrites > 0:
		return VerdictOrderMismatch
	}
	return VerdictSafe
}

func (f *findings) violate(format string, a ...any) {
	if len(f.Violations) < 20 {
		f.Violations = append(f.Violations, fmt.Sprintf(format, a...))
	} else if len(f.Violations) == 20 {
		f.Violations = append(f.Violations, "(more violations not listed)")
	}
}

// check verifies every invariant of docs/DESIGN.md §12 for one strategy's run. asked is the strategy the
// requests named ("" when the servers ran their own: then every answer must name the same one).
func check(asked string, purchases []*purchase, stats []ItemStats, orders []order) findings {
	f := findings{ErrorsByCode: map[string]int{}, StatusCounts: map[string]int{}}
	confirmed, expect := f.checkAnswers(asked, purchases)
	f.checkOrders(expect, purchases, confirmed, orders)
	f.checkStock(stats, orders)
	return f
}

// checkAnswers reads the client's own record: it counts the answers, checks that every 201/200
// names the expected strategy and that one key is always answered with one order id. It
// returns that order id per key, and the expected strategy (learned from the first answer when
// asked is "").
func (f *findings) checkAnswers(asked string, purchases []*purchase) (map[string]int64, string) {
	expect := asked
	confirmed := map[string]int64{}
	for _, p := range purchases {
		for i, r := range append(append([]purchaseResult{}, p.Attempts...), p.Replays...) {
			replay := i >= len(p.Attempts)
			if !replay {
				f.StatusCounts[fmt.Sprint(r.Status)]++
			}
			f.WorkSpentMS += r.WorkMS
			if r.Status < 200 || r.Status > 299 {
				f.WastedWorkMS += r.WorkMS
			}
			switch {
			case r.Status == 201 || r.Status == 200:
				if r.Status == 201 {
					f.Created++
				} else {
					f.Replayed++
				}
				if expect == "" {
					expect = r.Receipt.Strategy
				}
				if r.Receipt.Strategy != expect {
					f.WrongStrategy++
					f.violate("key %s: answer %d names strategy %q, asked %q", p.Key, r.Status, r.Receipt.Strategy, expect)
				}
				if id, ok := confirmed[p.Key]; ok && id != r.Receipt.OrderID {
					f.KeyConflicts++
					f.violate("key %s answered with orders %d and %d", p.Key, id, r.Receipt.OrderID)
				}
				confirmed[p.Key] = r.Receipt.OrderID
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
func (f *findings) checkOrders(expect string, purchases []*purchase, confirmed map[string]int64, orders []order) {
	byKey := make(map[string]*purchase, len(purchases))
	for _, p := range purchases {
		byKey[p.Key] = p
	}
	ordersByID := make(map[int64]order, len(orders))
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
			f.violate("order %d has no idempotency key (every request of the load test sends one)", o.OrderID)
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
func (f *findings) checkStock(stats []ItemStats, orders []order) {
	soldByItem := map[int64]int{}
	countByItem := map[int64]int{}
	for _, o := range orders {
		soldByItem[o.ItemID] += o.Quantity
		countByItem[o.ItemID]++
	}
	sorted := append([]ItemStats(nil), stats...)
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
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// expectedSafe reports whether docs/DESIGN.md §12 calls strategy safe in this setting: naive never, local
// in one process only, lock unless its lock can be lost unnoticed (a pause, a failover: a
// partition or latency leaves its watchdog running, which declares the loss in time), guard
// and lock+guard always.
// The demo strategies: the broken locks (no watchdog) only without chaos (their scripted
// failures: -scenario pitfalls); redis-stock and watch unless a failover can lose Redis's
// latest writes; optimistic and redis-stock+guard always.
func expectedSafe(strategy string, processes int, chaos string) bool {
	switch strategy {
	case "naive":
		return false
	case "local":
		return processes == 1
	case "lock":
		return chaos == "" || chaos == "partition" || chaos == "latency"
	case "setnx-expire", "del-release", "fixed-lease":
		return chaos == ""
	case "redis-stock", "watch":
		return chaos != "failover"
	}
	return true
}
