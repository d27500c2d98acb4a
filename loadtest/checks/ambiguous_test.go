package checks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// Every 503 the storefront answers before any write promises that nothing was written, to the
// history check and to the replay of ambiguous answers alike: an order row for a key answered
// only one of them stays an order mismatch (it is not replayed, which would account for it).
func TestRefusedBeforeWriteIsNotAmbiguous(t *testing.T) {
	for _, code := range []string{"at_capacity", "lock_timeout", "lock_lost", "lock_not_replicated"} {
		t.Run(code, func(t *testing.T) {
			_, refused := linearize.PurchaseOutcome(503, code, 0).(linearize.Refused)
			assert.True(t, refused, "the history: nothing written")
			key := "k1"
			p := &client.Purchase{Key: key, ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 503, Code: code}}}
			assert.False(t, Ambiguous(p), "not replayed")
			stats := []client.ItemStats{{ItemID: 1, InitialStock: 10, Stock: 9, SoldUnits: 1, OrderCount: 1}}
			orders := []client.Order{{OrderID: 7, ItemID: 1, Quantity: 1, Strategy: "lock", IdempotencyKey: &key}}
			f := Check("lock", []*client.Purchase{p}, stats, orders)
			assert.Equal(t, verdict.OrderMismatch, f.Verdict())
		})
	}
	for _, code := range []string{"unavailable", "internal"} {
		p := &client.Purchase{Key: "k", ItemID: 1, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 503, Code: code}}}
		assert.True(t, Ambiguous(p), "%s: the commit may have landed", code)
	}
}

// A history with nothing to check is not called linearizable.
func TestEmptyHistoryIsUnknown(t *testing.T) {
	cfg := config.Config{Stock: 10, CheckTimeout: time.Second}
	h := History(context.Background(), cfg, nil, []client.Item{{ID: 1}}, nil)
	assert.Equal(t, Unknown, h.Verdict)
	assert.Contains(t, h.Reason, "nothing to check")

	refused := []linearize.Operation{{Op: linearize.Purchase{Item: 1, Quantity: 1, Key: "a"},
		Outcome: linearize.Refused{Code: "lock_timeout"}, Call: 0, Return: 10, Ended: true}}
	h = History(context.Background(), cfg, refused, []client.Item{{ID: 1}}, nil)
	assert.Equal(t, Unknown, h.Verdict, "every purchase refused: nothing checked")

	sold := []linearize.Operation{{Op: linearize.Purchase{Item: 1, Quantity: 1, Key: "a"},
		Outcome: linearize.Sold{Remaining: 9}, Call: 0, Return: 10, Ended: true}}
	assert.Equal(t, Linearizable, History(context.Background(), cfg, sold, []client.Item{{ID: 1}}, nil).Verdict)
}
