package main

import (
	"github.com/stockguard/stockguard/internal/verdict"
)

// check judges one strategy's run (internal/verdict: every invariant of docs/DESIGN.md §12)
// from the client's own record of the answers and the servers' items and orders. asked is the
// strategy the requests named ("" when the servers ran their own).
func check(asked string, purchases []*purchase, stats []ItemStats, orders []order) verdict.Findings {
	ps := make([]verdict.Purchase, len(purchases))
	for i, p := range purchases {
		ps[i] = verdict.Purchase{Key: p.Key, ItemID: p.ItemID, Quantity: p.Quantity,
			Attempts: answersOf(p.Attempts), Replays: answersOf(p.Replays)}
	}
	return verdict.Check(asked, ps, itemsOf(stats), ordersOf(orders))
}

func answersOf(rs []purchaseResult) []verdict.Answer {
	if len(rs) == 0 {
		return nil
	}
	out := make([]verdict.Answer, len(rs))
	for i, r := range rs {
		out[i] = verdict.Answer{Status: r.Status, Code: r.Code, OrderID: r.Receipt.OrderID, Strategy: r.Receipt.Strategy, WorkMS: r.WorkMS}
	}
	return out
}

func itemsOf(stats []ItemStats) []verdict.Item {
	out := make([]verdict.Item, len(stats))
	for i, s := range stats {
		out[i] = itemOf(s)
	}
	return out
}

func itemOf(s ItemStats) verdict.Item {
	return verdict.Item{ItemID: s.ItemID, InitialStock: s.InitialStock, Stock: s.Stock, SoldUnits: s.SoldUnits, OrderCount: s.OrderCount, HeldUnits: s.HeldUnits}
}

func ordersOf(orders []order) []verdict.Order {
	out := make([]verdict.Order, len(orders))
	for i, o := range orders {
		out[i] = verdict.Order{OrderID: o.OrderID, ItemID: o.ItemID, Quantity: o.Quantity, Strategy: o.Strategy,
			FenceToken: o.FenceToken, IdempotencyKey: o.IdempotencyKey, BatchID: o.BatchID, Lines: receiptLines(o.Lines)}
	}
	return out
}
