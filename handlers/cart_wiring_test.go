package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// GET /api/orders shows every order's lines: a purchase keeps its item_id and quantity and
// has one line; a cart's order of several items has item_id 0, the sum of its lines as its
// quantity, and one line per item. On both database backends.
func TestOrdersShowLines(t *testing.T) { dbs.ForEach(t, testOrdersShowLines) }

func testOrdersShowLines(t *testing.T, be dbtest.Backend) {
	e := newEnv(t, envOptions{redis: redistest.Start(t), backend: &be})
	require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":2}`).status)
	cart := e.do("POST", "/api/checkout", `{"lines":[{"item_id":2,"quantity":3},{"item_id":1,"quantity":1}]}`)
	require.Equal(t, http.StatusCreated, cart.status, "%s", cart.body)
	var h holdAnswer
	decode(t, e.do("POST", "/api/holds", `{"lines":[{"item_id":3,"quantity":1}]}`), &h)
	require.Equal(t, http.StatusCreated, e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h.ID), "").status)

	type line struct {
		ItemID   int64 `json:"item_id"`
		Quantity int   `json:"quantity"`
	}
	type order struct {
		OrderID  int64  `json:"order_id"`
		ItemID   int64  `json:"item_id"`
		Quantity int    `json:"quantity"`
		Lines    []line `json:"lines"`
	}
	a := e.do("GET", "/api/orders", "")
	require.Equal(t, http.StatusOK, a.status)
	var orders []order
	decode(t, a, &orders)
	require.Len(t, orders, 3, "%s", a.body)
	assert.Equal(t, order{OrderID: orders[0].OrderID, ItemID: 1, Quantity: 2, Lines: []line{{1, 2}}}, orders[0])
	assert.Equal(t, order{OrderID: orders[1].OrderID, ItemID: 0, Quantity: 4, Lines: []line{{1, 1}, {2, 3}}}, orders[1])
	assert.Equal(t, order{OrderID: orders[2].OrderID, ItemID: 3, Quantity: 1, Lines: []line{{3, 1}}}, orders[2],
		"a confirmed hold of one line shows its item")

	var page []order
	decode(t, e.do("GET", fmt.Sprintf("/api/orders?after_id=%d&limit=1", orders[0].OrderID), ""), &page)
	require.Len(t, page, 1)
	assert.Equal(t, orders[1], page[0], "a page carries its orders' lines")
	var none []order
	decode(t, e.do("GET", "/api/orders?after_id=999999", ""), &none)
	assert.NotNil(t, none, "an empty page is [] not null")
	assert.Empty(t, none)
}

// --max-purchases counts checkouts, hold placements and confirmations: with the one slot
// taken by a purchase in flight they answer 503 at_capacity, a cancel is still served, and
// /metrics counts every answer of the cart routes by result.
func TestCartsTakePurchaseBound(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t), configure: func(c *handlers.Config) { c.MaxPurchases = 1 }})
	var h1, h2 holdAnswer
	decode(t, e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`), &h1)
	decode(t, e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`), &h2)
	require.Positive(t, h2.ID)

	entered, leave := make(chan struct{}), make(chan struct{})
	e.wrap.purchase = func(ctx context.Context, req inventory.PurchaseRequest) (inventory.Receipt, error) {
		close(entered)
		<-leave
		return e.svc.Purchase(ctx, req)
	}
	done := make(chan answer, 1)
	go func() { done <- e.do("POST", "/api/items/2/purchase", `{"quantity":1}`) }()
	<-entered
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`},
		{"POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`},
		{"POST", fmt.Sprintf("/api/holds/%d/confirm", h1.ID), ""},
	} {
		a := e.do(r.method, r.path, r.body)
		assert.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s: %s", r.method, r.path, a.body)
		assert.Equal(t, "at_capacity", a.errorCode())
		assert.Equal(t, "1", a.header.Get("Retry-After"))
	}
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", fmt.Sprintf("/api/holds/%d", h2.ID), "").status,
		"a cancel only gives units back: it takes no slot")
	close(leave)
	require.Equal(t, http.StatusCreated, (<-done).status)

	require.Equal(t, http.StatusCreated, e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`, "Idempotency-Key: b-1").status)
	require.Equal(t, http.StatusOK, e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`, "Idempotency-Key: b-1").status)
	require.Equal(t, http.StatusConflict, e.do("POST", "/api/checkout", `{"lines":[{"item_id":3,"quantity":5}]}`).status)
	require.Equal(t, http.StatusCreated, e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h1.ID), "").status)
	require.Equal(t, http.StatusOK, e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h1.ID), "").status)
	require.Equal(t, http.StatusConflict, e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h2.ID), "").status,
		"a cancelled hold is not confirmed")

	body := string(e.do("GET", "/metrics", "").body)
	for _, want := range []string{
		`stockguard_checkouts_total{result="at_capacity"} 1`,
		`stockguard_checkouts_total{result="created"} 1`,
		`stockguard_checkouts_total{result="replayed"} 1`,
		`stockguard_checkouts_total{result="insufficient_stock"} 1`,
		`stockguard_stock_hold_requests_total{op="place",result="created"} 2`,
		`stockguard_stock_hold_requests_total{op="place",result="at_capacity"} 1`,
		`stockguard_stock_hold_requests_total{op="confirm",result="at_capacity"} 1`,
		`stockguard_stock_hold_requests_total{op="confirm",result="created"} 1`,
		`stockguard_stock_hold_requests_total{op="confirm",result="replayed"} 1`,
		`stockguard_stock_hold_requests_total{op="confirm",result="hold_not_active"} 1`,
		`stockguard_stock_hold_requests_total{op="cancel",result="cancelled"} 1`,
	} {
		assert.Contains(t, body, want)
	}
}

// testFault is an interceptor that changes nothing: what matters is that one is given.
type testFault struct{}

func (testFault) Locker(_ string, l inventory.Locker) inventory.Locker { return l }
func (testFault) BeforeWrite(context.Context, int64, string) error     { return nil }

// Config.Intercept acts on single purchases only: a cart or hold request it would give an
// interceptor is refused in words (400), its refusal is answered as it classifies, and a
// request it leaves alone sells.
func TestCartsRefuseInjectedFaults(t *testing.T) {
	var asked atomic.Int32
	e := newEnv(t, envOptions{redis: redistest.Start(t), configure: func(c *handlers.Config) {
		c.Intercept = func(r *http.Request) (inventory.Interceptor, error) {
			asked.Add(1)
			switch r.Header.Get("X-Test-Fault") {
			case "":
				return nil, nil
			case "bad":
				return nil, fmt.Errorf("%w: no such fault", inventory.ErrInvalid)
			}
			return testFault{}, nil
		}
	}})
	for _, path := range []string{"/api/checkout", "/api/holds"} {
		a := e.do("POST", path, `{"lines":[{"item_id":1,"quantity":1}]}`, "X-Test-Fault: stall")
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", path, a.body)
		assert.Equal(t, "invalid_request", a.errorCode())
		assert.Contains(t, string(a.body), "injected faults act on single purchases only")
		bad := e.do("POST", path, `{"lines":[{"item_id":1,"quantity":1}]}`, "X-Test-Fault: bad")
		assert.Equal(t, http.StatusBadRequest, bad.status)
		assert.Contains(t, string(bad.body), "no such fault")
		assert.Equal(t, http.StatusCreated, e.do("POST", path, `{"lines":[{"item_id":1,"quantity":1}]}`).status)
	}
	assert.Contains(t, string(e.do("GET", "/api/items/1", "").body), `"stock":8`, "the refused requests wrote nothing")
	assert.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Test-Fault: stall").status,
		"a purchase runs through its fault")
	assert.Equal(t, int32(7), asked.Load(), "asked once per cart, hold and purchase request")
}

// A hold's answer carries the database's clock (now): a client counts down expires_at − now.
// On both database backends.
func TestHoldAnswerCarriesNow(t *testing.T) { dbs.ForEach(t, testHoldAnswerCarriesNow) }

func testHoldAnswerCarriesNow(t *testing.T, be dbtest.Backend) {
	e := newEnv(t, envOptions{backend: &be})
	var h struct {
		ID        int64     `json:"id"`
		ExpiresAt time.Time `json:"expires_at"`
		Now       time.Time `json:"now"`
	}
	decode(t, e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}],"ttl":"90s"}`), &h)
	assert.Equal(t, 90*time.Second, h.ExpiresAt.Sub(h.Now))
	decode(t, e.do("GET", fmt.Sprintf("/api/holds/%d", h.ID), ""), &h)
	assert.Positive(t, h.ExpiresAt.Sub(h.Now))
	assert.LessOrEqual(t, h.ExpiresAt.Sub(h.Now), 90*time.Second)
}
