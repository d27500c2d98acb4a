// Package checks judges a strategy's run: every invariant of docs/DESIGN.md §12 through
// internal/verdict, the recorded history through internal/linearize, and which answers leave a
// purchase's outcome unknown.
package checks

import (
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/client"
)

// Check judges one strategy's run (internal/verdict: every invariant of docs/DESIGN.md §12)
// from the client's own record of the answers and the servers' items and orders. asked is the
// strategy the requests named ("" when the servers ran their own).
func Check(asked string, purchases []*client.Purchase, stats []client.ItemStats, orders []client.Order) verdict.Findings {
	ps := make([]verdict.Purchase, len(purchases))
	for i, p := range purchases {
		ps[i] = verdict.Purchase{Key: p.Key, ItemID: p.ItemID, Quantity: p.Quantity,
			Attempts: answersOf(p.Attempts), Replays: answersOf(p.Replays)}
	}
	return verdict.Check(asked, ps, ItemsOf(stats), OrdersOf(orders))
}

func answersOf(rs []client.PurchaseResult) []verdict.Answer {
	if len(rs) == 0 {
		return nil
	}
	out := make([]verdict.Answer, len(rs))
	for i, r := range rs {
		out[i] = verdict.Answer{Status: r.Status, Code: r.Code, OrderID: r.Receipt.OrderID, Strategy: r.Receipt.Strategy, WorkMS: r.WorkMS}
	}
	return out
}

func ItemsOf(stats []client.ItemStats) []verdict.Item {
	out := make([]verdict.Item, len(stats))
	for i, s := range stats {
		out[i] = ItemOf(s)
	}
	return out
}

func ItemOf(s client.ItemStats) verdict.Item {
	return verdict.Item{ItemID: s.ItemID, InitialStock: s.InitialStock, Stock: s.Stock, SoldUnits: s.SoldUnits, OrderCount: s.OrderCount, HeldUnits: s.HeldUnits}
}

func OrdersOf(orders []client.Order) []verdict.Order {
	out := make([]verdict.Order, len(orders))
	for i, o := range orders {
		out[i] = verdict.Order{OrderID: o.OrderID, ItemID: o.ItemID, Quantity: o.Quantity, Strategy: o.Strategy,
			FenceToken: o.FenceToken, IdempotencyKey: o.IdempotencyKey, BatchID: o.BatchID, Lines: receiptLines(o.Lines)}
	}
	return out
}

func LinesOf(ls []client.CartLine) []verdict.Line {
	out := make([]verdict.Line, len(ls))
	for i, l := range ls {
		out[i] = verdict.Line{ItemID: l.ItemID, Quantity: l.Quantity}
	}
	return out
}

func receiptLines(ls []client.LineReceipt) []verdict.Line {
	if ls == nil {
		return nil
	}
	out := make([]verdict.Line, len(ls))
	for i, l := range ls {
		out[i] = verdict.Line{ItemID: l.ItemID, Quantity: l.Quantity, Remaining: l.Remaining, FenceToken: l.FenceToken}
	}
	return out
}

func CartAnswers(rs []client.CartResult) []verdict.Answer {
	if len(rs) == 0 {
		return nil
	}
	out := make([]verdict.Answer, len(rs))
	for i, r := range rs {
		out[i] = verdict.Answer{Status: r.Status, Code: r.Code, OrderID: r.Receipt.OrderID, Strategy: r.Receipt.Strategy,
			WorkMS: r.WorkMS, Lines: receiptLines(r.Receipt.Lines), Sent: r.Start}
	}
	return out
}
