package workload

import (
	"context"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResolveAmbiguous: a purchase answered with a server error around a commit, whose key
// has an order row, is replayed and its order accounted for; one answered sold out or refused
// before any write keeps its order row unaccounted for (ORDER MISMATCH).
func TestResolveAmbiguous(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	ctx := context.Background()
	cfg := config.Config{Strategies: []string{"guard"}, Items: 1, Stock: 10, Requests: 200, Concurrency: 16, Quantity: 1,
		Hot: 1, Retry: 0.1, Work: 5 * time.Millisecond, Timeout: 5 * time.Second, Seed: 42, Quiet: true}
	a := &client.API{Base: srv.URL, Token: "t0k", HC: client.NewHTTPClient(4, 5*time.Second)}
	defer a.HC.CloseIdleConnections()
	require.NoError(t, a.Reset(ctx, []client.NewItem{{SKU: "LT-0001", Name: "Load test item 1", Stock: 10, PriceCents: 100}}))
	items, err := a.Items(ctx)
	require.NoError(t, err)
	require.Len(t, items, 1)
	w := &Workload{cfg: cfg, apis: []*client.API{a}, items: items, strategy: "guard"}
	id := items[0].ID
	// The orders exist: the server wrote them, then (as if its database restarted between the
	// commit and its acknowledgement) the client got an error.
	for _, key := range []string{"lost-commit", "sold-out-lie", "refused-lie"} {
		r := a.Purchase(ctx, client.PurchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: "guard"})
		require.Equal(t, 201, r.Status)
	}
	w.results = []*client.Purchase{
		{Key: "lost-commit", ItemID: id, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 503, Code: "unavailable"}}},
		{Key: "sold-out-lie", ItemID: id, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 409, Code: "sold_out"}}},
		{Key: "refused-lie", ItemID: id, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 503, Code: "at_capacity"}}},
		{Key: "never-written", ItemID: id, Quantity: 1, Attempts: []client.PurchaseResult{{Status: 500, Code: "internal"}}},
	}
	orders, err := a.Orders(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, w.ResolveAmbiguous(ctx, orders), "only the ambiguous answer with an order row is replayed")
	require.Len(t, w.results[0].Replays, 1)
	assert.Equal(t, 200, w.results[0].Replays[0].Status, "the replay finds the order")
	assert.Empty(t, w.results[3].Replays, "no order row: nothing to resolve")
	stats, err := a.Stats(ctx)
	require.NoError(t, err)
	f := checks.Check("guard", w.results, stats, orders)
	assert.Equal(t, 2, f.OrdersWithout201, "the lies stay: %v", f.Violations)
	for _, v := range f.Violations {
		assert.NotContains(t, v, "lost-commit")
	}
}

// TestHoldUnknown: a placement may own an unnamed hold only while no answer names one and no
// replay after the run was refused outright (an attempt's refusal proves nothing: a lost
// attempt may still run).
func TestHoldUnknown(t *testing.T) {
	named := client.CartResult{Status: 201, Hold: client.HoldBody{ID: 5}}
	lost, refused, failed := client.CartResult{}, client.CartResult{Status: 409}, client.CartResult{Status: 503}
	for _, tc := range []struct {
		name              string
		attempts, replays []client.CartResult
		unknown           bool
	}{
		{"answered with its hold", []client.CartResult{lost, named}, nil, false},
		{"refused", []client.CartResult{refused}, nil, false},
		{"lost", []client.CartResult{lost}, nil, true},
		{"a copy refused while the attempt was lost", []client.CartResult{refused, lost}, nil, true},
		{"lost, every replay lost or failed", []client.CartResult{lost}, []client.CartResult{failed, lost}, true},
		{"lost, the replay refused", []client.CartResult{lost}, []client.CartResult{failed, refused}, false},
		{"lost, the replay answered the key's hold", []client.CartResult{lost}, []client.CartResult{{Status: 200, Hold: client.HoldBody{ID: 5}}}, false},
	} {
		h := &hold{Attempts: tc.attempts, Replays: tc.replays}
		assert.Equal(t, tc.unknown, h.unknown(), tc.name)
	}
	assert.Equal(t, 409, decidePlace([]client.CartResult{lost, refused}).Status, "the refusal decides, not the lost attempt")
}
