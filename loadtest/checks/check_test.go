package checks

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/client"
)

// TestCheckWastedWorkAndTokens: check hands internal/verdict the load test's own record (the
// work of refused attempts is wasted, the work of sold ones is not) and the order rows (one
// fence token written by two transactions, batch ids, is an order mismatch).
func TestCheckWastedWorkAndTokens(t *testing.T) {
	key := func(s string) *string { return &s }
	ps := []*client.Purchase{
		{Key: "a", ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{
			{Status: 201, WorkMS: 20, Receipt: client.Receipt{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard"}},
			{Status: 200, WorkMS: 0, Receipt: client.Receipt{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard"}}}},
		{Key: "b", ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{
			{Status: 201, WorkMS: 20, Receipt: client.Receipt{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "lock+guard"}}}},
		{Key: "c", ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 409, Code: "sold_out", WorkMS: 20}}},
		{Key: "d", ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 409, Code: "sold_out"}}},
		{Key: "e", ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 503, Code: "lock_lost", WorkMS: 7.5}}},
	}
	stats := []client.ItemStats{{ItemID: 1, InitialStock: 2, Stock: 0, SoldUnits: 2, OrderCount: 2}}
	oneBatch := []client.Order{
		{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard", FenceToken: 9, BatchID: 77, IdempotencyKey: key("a")},
		{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "lock+guard", FenceToken: 9, BatchID: 77, IdempotencyKey: key("b")},
	}
	f := Check("lock+guard", ps, stats, oneBatch)
	assert.Equal(t, verdict.Safe, f.Verdict(), f.Violations)
	assert.InDelta(t, 67.5, f.WorkSpentMS, 1e-9)
	assert.InDelta(t, 27.5, f.WastedWorkMS, 1e-9)
	assert.Equal(t, 0, f.TokenRewrites)
	assert.Equal(t, 1, f.WriteTxs)
	assert.InDelta(t, 2.0, f.MeanBatch, 1e-9, "two orders in one write transaction")

	twoBatches := append([]client.Order(nil), oneBatch...)
	twoBatches[1].BatchID = 78
	f = Check("lock+guard", ps, stats, twoBatches)
	assert.Equal(t, 1, f.TokenRewrites)
	assert.Equal(t, 2, f.WriteTxs)
	assert.Equal(t, verdict.OrderMismatch, f.Verdict())
	assert.Contains(t, strings.Join(f.Violations, "\n"), "fence token 9 written by two transactions")
}
