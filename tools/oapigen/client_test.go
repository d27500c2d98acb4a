package oapigen_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/apicheck"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/tools/oapigen/apiclient"
)

// TestGeneratedClientIsCurrent regenerates the client from the document as go generate
// does (apiclient/generate.go) and compares it byte for byte with the committed one: a
// change of the document without a regeneration, or a hand edit of the client, fails here.
func TestGeneratedClientIsCurrent(t *testing.T) {
	out := filepath.Join(t.TempDir(), "client.gen.go")
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", "../oapi-codegen.yaml", "-o", out, "../../../handlers/openapi.json")
	cmd.Dir = "apiclient"
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	fresh, err := os.ReadFile(out)
	require.NoError(t, err)
	committed, err := os.ReadFile("apiclient/client.gen.go")
	require.NoError(t, err)
	require.True(t, bytes.Equal(fresh, committed),
		"apiclient/client.gen.go is not what oapi-codegen makes of handlers/openapi.json: run go generate ./... in tools/oapigen")
	doc, err := os.ReadFile("../../handlers/openapi.json")
	require.NoError(t, err)
	assert.Equal(t, handlers.OpenAPI(), doc, "the document served is the file generated from")
}

// TestClientAgainstStorefront runs the real storefront (the binary, with a redis-server and an
// SQLite file: loadtest/cluster) and drives it with nothing but the generated client: a
// purchase and its idempotent replay, a cart checked out, a hold placed, read, confirmed,
// and another cancelled, and the errors of each read from the client's typed answers. Every
// answer is checked against the document on the way too (internal/apicheck).
func TestClientAgainstStorefront(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := cluster.BuildStorefront(ctx, "../..", t.TempDir())
	require.NoError(t, err)
	c, err := cluster.Start(ctx, cluster.Config{Bin: bin, Instances: 1})
	require.NoError(t, err)
	defer c.Close()

	checker, err := apicheck.New(handlers.OpenAPI())
	require.NoError(t, err)
	client, err := apiclient.NewClientWithResponses(c.URLs()[0],
		apiclient.WithHTTPClient(&http.Client{Transport: checker.Transport(nil), Timeout: 30 * time.Second}))
	require.NoError(t, err)
	admin := func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+c.AdminToken)
		return nil
	}

	// The catalogue: two items of five units.
	reset, err := client.AdminResetWithResponse(ctx, apiclient.ResetRequest{Items: []apiclient.NewItem{
		{Sku: "GEN-A", Name: "generated a", Stock: ptr(5), PriceCents: ptr(int64(100))},
		{Sku: "GEN-B", Name: "generated b", Stock: ptr(5)},
	}}, admin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reset.StatusCode(), "%s", reset.Body)
	items := *reset.JSON200
	require.Len(t, items, 2)
	a, b := items[0].Id, items[1].Id
	unauth, err := client.AdminResetWithResponse(ctx, apiclient.ResetRequest{Items: []apiclient.NewItem{}})
	require.NoError(t, err)
	require.NotNil(t, unauth.JSON401, "%d %s", unauth.StatusCode(), unauth.Body)
	assert.Equal(t, apiclient.UnauthorizedErrorErrorCode("unauthorized"), unauth.JSON401.Error.Code)

	// A purchase, its replay under the same key, and one the stock cannot serve.
	key := "gen-purchase-1"
	buy, err := client.PurchaseWithResponse(ctx, a, &apiclient.PurchaseParams{IdempotencyKey: &key}, apiclient.PurchaseRequest{Quantity: 2})
	require.NoError(t, err)
	require.NotNil(t, buy.JSON201, "%d %s", buy.StatusCode(), buy.Body)
	assert.Equal(t, 3, buy.JSON201.Remaining)
	assert.Equal(t, a, buy.JSON201.ItemId)
	assert.Positive(t, buy.JSON201.FenceToken, "lock+guard wrote it under the item's lock")
	again, err := client.PurchaseWithResponse(ctx, a, &apiclient.PurchaseParams{IdempotencyKey: &key}, apiclient.PurchaseRequest{Quantity: 2})
	require.NoError(t, err)
	require.NotNil(t, again.JSON200, "%d %s", again.StatusCode(), again.Body)
	assert.Equal(t, buy.JSON201.OrderId, again.JSON200.OrderId)
	short, err := client.PurchaseWithResponse(ctx, a, nil, apiclient.PurchaseRequest{Quantity: 10})
	require.NoError(t, err)
	require.NotNil(t, short.JSON409, "%d %s", short.StatusCode(), short.Body)
	assert.EqualValues(t, "insufficient_stock", short.JSON409.Error.Code)

	// A cart, all or nothing: one that sells, one refused naming its short line.
	cart, err := client.CheckoutWithResponse(ctx, nil, apiclient.CheckoutRequest{Lines: []apiclient.CartLine{
		{ItemId: b, Quantity: 2}, {ItemId: a, Quantity: 1},
	}})
	require.NoError(t, err)
	require.NotNil(t, cart.JSON201, "%d %s", cart.StatusCode(), cart.Body)
	require.Len(t, cart.JSON201.Lines, 2)
	assert.Equal(t, a, cart.JSON201.Lines[0].ItemId, "lines ascending by item")
	assert.Equal(t, 2, cart.JSON201.Lines[0].Remaining)
	assert.Equal(t, 3, cart.JSON201.Lines[1].Remaining)
	refused, err := client.CheckoutWithResponse(ctx, nil, apiclient.CheckoutRequest{Lines: []apiclient.CartLine{
		{ItemId: a, Quantity: 1}, {ItemId: b, Quantity: 4},
	}})
	require.NoError(t, err)
	require.NotNil(t, refused.JSON409, "%d %s", refused.StatusCode(), refused.Body)
	assert.EqualValues(t, "insufficient_stock", refused.JSON409.Error.Code)
	assert.Equal(t, []apiclient.ShortLine{{ItemId: b, Requested: 4, Available: 3}}, refused.JSON409.Error.Lines)

	// A hold: placed (the units leave the stock), read, confirmed (an order), confirmed again
	// (the same order), and no longer cancellable; another placed and cancelled.
	ttl := "1m"
	hold, err := client.PlaceHoldWithResponse(ctx, nil, apiclient.HoldRequest{Ttl: &ttl, Lines: []apiclient.CartLine{
		{ItemId: a, Quantity: 1}, {ItemId: b, Quantity: 1},
	}})
	require.NoError(t, err)
	require.NotNil(t, hold.JSON201, "%d %s", hold.StatusCode(), hold.Body)
	h := *hold.JSON201
	assert.Equal(t, apiclient.HoldStatus("active"), h.Status)
	assert.InDelta(t, time.Minute.Seconds(), h.ExpiresAt.Sub(h.Now).Seconds(), 1)
	got, err := client.GetHoldWithResponse(ctx, h.Id)
	require.NoError(t, err)
	require.NotNil(t, got.JSON200, "%d %s", got.StatusCode(), got.Body)
	assert.Equal(t, h.Lines, got.JSON200.Lines)
	confirmed, err := client.ConfirmHoldWithResponse(ctx, h.Id)
	require.NoError(t, err)
	require.NotNil(t, confirmed.JSON201, "%d %s", confirmed.StatusCode(), confirmed.Body)
	require.NotNil(t, confirmed.JSON201.HoldId)
	assert.Equal(t, h.Id, *confirmed.JSON201.HoldId)
	reconfirmed, err := client.ConfirmHoldWithResponse(ctx, h.Id)
	require.NoError(t, err)
	require.NotNil(t, reconfirmed.JSON200, "%d %s", reconfirmed.StatusCode(), reconfirmed.Body)
	assert.Equal(t, confirmed.JSON201.OrderId, reconfirmed.JSON200.OrderId)
	notActive, err := client.CancelHoldWithResponse(ctx, h.Id)
	require.NoError(t, err)
	require.NotNil(t, notActive.JSON409, "%d %s", notActive.StatusCode(), notActive.Body)
	assert.EqualValues(t, "hold_not_active", notActive.JSON409.Error.Code)
	other, err := client.PlaceHoldWithResponse(ctx, nil, apiclient.HoldRequest{Lines: []apiclient.CartLine{{ItemId: b, Quantity: 2}}})
	require.NoError(t, err)
	require.NotNil(t, other.JSON201, "%d %s", other.StatusCode(), other.Body)
	cancelled, err := client.CancelHoldWithResponse(ctx, other.JSON201.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, cancelled.StatusCode(), "%s", cancelled.Body)

	// What the storefront says it sold: a 2 + 1 + 1 (the purchase, the cart, the hold), b
	// 2 + 1; the cancelled hold's units are back; three orders.
	stats, err := client.StatsWithResponse(ctx)
	require.NoError(t, err)
	require.NotNil(t, stats.JSON200, "%d %s", stats.StatusCode(), stats.Body)
	sold := map[int64][3]int{}
	for _, s := range *stats.JSON200 {
		sold[s.ItemId] = [3]int{s.SoldUnits, s.Stock, s.HeldUnits + s.OversoldUnits}
	}
	assert.Equal(t, map[int64][3]int{a: {4, 1, 0}, b: {3, 2, 0}}, sold)
	limit := 10
	orders, err := client.ListOrdersWithResponse(ctx, &apiclient.ListOrdersParams{Limit: &limit})
	require.NoError(t, err)
	require.NotNil(t, orders.JSON200, "%d %s", orders.StatusCode(), orders.Body)
	assert.Len(t, *orders.JSON200, 3)
	assert.Empty(t, checker.Violations())
	assert.Positive(t, checker.Checked())
}

func ptr[T any](v T) *T { return &v }
