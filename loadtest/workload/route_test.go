package workload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
)

// TestRouteItemFailsOver: routed by item, a purchase whose instance refuses the connection goes
// to the next instance on the item's ring (nginx's proxy_next_upstream error); round-robin, it
// fails.
func TestRouteItemFailsOver(t *testing.T) {
	f, live := testkit.NewFake(t, true)
	dead := httptest.NewServer(f)
	dead.Close() // its port now refuses connections
	hc := client.NewHTTPClient(4, 5*time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	ctx := context.Background()
	admin := &client.API{Base: live.URL, Token: "t0k", HC: hc}
	require.NoError(t, admin.Reset(ctx, []client.NewItem{{SKU: "A", Name: "a", Stock: 5, PriceCents: 1}}))
	items, err := admin.Items(ctx)
	require.NoError(t, err)
	id := items[0].ID

	w := &Workload{apis: []*client.API{{Base: dead.URL, HC: hc}, admin}, order: map[int64][]int{id: {0, 1}}}
	r := w.send(ctx, spec{itemID: id, instance: 0}, client.PurchaseReq{ItemID: id, Quantity: 1, Key: "k1"})
	assert.Equal(t, http.StatusCreated, r.Status, "%v", r.Err)

	w.order = nil
	r = w.send(ctx, spec{itemID: id, instance: 0}, client.PurchaseReq{ItemID: id, Quantity: 1, Key: "k2"})
	assert.Zero(t, r.Status)
	assert.ErrorIs(t, r.Err, syscall.ECONNREFUSED)
}
