package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/models"
)

type cartAnswer struct {
	OrderID  int64                   `json:"order_id"`
	Lines    []inventory.LineReceipt `json:"lines"`
	Strategy string                  `json:"strategy"`
	HoldID   int64                   `json:"hold_id"`
}

type shortAnswer struct {
	Error struct {
		Code    string                `json:"code"`
		Message string                `json:"message"`
		Lines   []inventory.ShortLine `json:"lines"`
	} `json:"error"`
}

// The checkout route: 201 a new order, 200 its replay, 422 another cart under the key, 409
// with the short lines named, and every stock untouched by a refused cart.
func TestCheckoutRoute(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t)})
	a := e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":2},{"item_id":2,"quantity":1},{"item_id":1,"quantity":1}]}`, "Idempotency-Key: c-1")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	var rec cartAnswer
	decode(t, a, &rec)
	assert.Equal(t, inventory.StrategyLockGuard, rec.Strategy)
	require.Len(t, rec.Lines, 2)
	assert.Equal(t, int64(1), rec.Lines[0].ItemID)
	assert.Equal(t, 3, rec.Lines[0].Quantity, "lines of one item merged")
	assert.Equal(t, 7, rec.Lines[0].Remaining)
	assert.Positive(t, rec.Lines[0].FenceToken)

	again := e.do("POST", "/api/checkout", `{"lines":[{"item_id":2,"quantity":1},{"item_id":1,"quantity":3}]}`, "Idempotency-Key: c-1")
	require.Equal(t, http.StatusOK, again.status, "%s", again.body)
	assert.JSONEq(t, string(a.body), string(again.body), "the original body")

	conflict := e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`, "Idempotency-Key: c-1")
	assert.Equal(t, http.StatusUnprocessableEntity, conflict.status)
	assert.Equal(t, "idempotency_conflict", conflict.errorCode())

	short := e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1},{"item_id":3,"quantity":2},{"item_id":1,"quantity":7}]}`)
	require.Equal(t, http.StatusConflict, short.status, "%s", short.body)
	var sa shortAnswer
	decode(t, short, &sa)
	assert.Equal(t, "insufficient_stock", sa.Error.Code)
	assert.Contains(t, sa.Error.Message, "item 1: 8 asked, 7 available")
	assert.Equal(t, []inventory.ShortLine{{ItemID: 1, Requested: 8, Available: 7}, {ItemID: 3, Requested: 2, Available: 1}}, sa.Error.Lines)
	item := e.do("GET", "/api/items/3", "")
	assert.Contains(t, string(item.body), `"stock":1`, "nothing written")

	missing := e.do("POST", "/api/checkout", `{"lines":[{"item_id":77,"quantity":1},{"item_id":1,"quantity":1},{"item_id":78,"quantity":1}]}`)
	assert.Equal(t, http.StatusNotFound, missing.status)
	assert.Equal(t, "not_found", missing.errorCode())
	assert.Contains(t, string(missing.body), "items 77, 78")

	stats := e.do("GET", "/api/stats", "")
	assert.Contains(t, string(stats.body), `"held_units":0`)
}

func TestCheckoutBadRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	many := make([]string, inventory.MaxCartLines+1)
	for i := range many {
		many[i] = `{"item_id":1,"quantity":1}`
	}
	for _, tc := range []struct {
		name, body, want string
		headers          []string
		status           int
	}{
		{"empty body", "", "JSON object", nil, 400},
		{"no lines", `{}`, "lines must be an array", nil, 400},
		{"empty lines", `{"lines":[]}`, "at least one line", nil, 400},
		{"lines not an array", `{"lines":{"item_id":1}}`, "lines must be an array", nil, 400},
		{"unknown field", `{"lines":[{"item_id":1,"quantity":1}],"coupon":"x"}`, "unknown or repeated field", nil, 400},
		{"unknown line field", `{"lines":[{"item_id":1,"quantity":1,"price":0}]}`, "line 1", nil, 400},
		{"string quantity", `{"lines":[{"item_id":1,"quantity":"2"}]}`, "line 1: quantity", nil, 400},
		{"negative item", `{"lines":[{"item_id":-1,"quantity":2}]}`, "line 1: item_id", nil, 400},
		{"zero quantity", `{"lines":[{"item_id":1,"quantity":0}]}`, "quantity must be an integer from 1 to 1000", nil, 400},
		{"merged over the limit", `{"lines":[{"item_id":1,"quantity":600},{"item_id":1,"quantity":600}]}`, "add up to 1200", nil, 400},
		{"too many lines", `{"lines":[` + strings.Join(many, ",") + `]}`, "at most 50 lines", nil, 400},
		{"strategy outside demo", `{"lines":[{"item_id":1,"quantity":1}]}`, "only accepted", []string{"X-Strategy: guard"}, 400},
		{"empty key", `{"lines":[{"item_id":1,"quantity":1}]}`, "Idempotency-Key", []string{"Idempotency-Key:"}, 400},
		{"too large", `{"lines":[` + strings.Repeat(" ", handlersMaxBody) + `]}`, "too large", nil, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do("POST", "/api/checkout", tc.body, tc.headers...)
			assert.Equal(t, tc.status, a.status, "%s", a.body)
			assert.Contains(t, string(a.body), tc.want)
			assert.NotEmpty(t, a.errorCode(), "the one error shape")
		})
	}
	assert.Equal(t, http.StatusMethodNotAllowed, e.do("GET", "/api/checkout", "").status)
	demo := newEnv(t, envOptions{demo: true})
	a := demo.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`, "X-Strategy: lock")
	assert.Equal(t, http.StatusBadRequest, a.status)
	assert.Contains(t, string(a.body), "does not sell carts")
	a = demo.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`, "X-Strategy: naive")
	assert.Equal(t, http.StatusCreated, a.status, "%s", a.body)
}

const handlersMaxBody = 8 << 10

type holdAnswer struct {
	ID        int64                   `json:"id"`
	Status    string                  `json:"status"`
	Lines     []inventory.LineReceipt `json:"lines"`
	ExpiresAt time.Time               `json:"expires_at"`
	OrderID   int64                   `json:"order_id"`
}

// The hold routes: place (201), read, confirm (201, then 200 with the same order), cancel
// (204, idempotent), confirm after expiry (410), and the errors.
func TestHoldRoutes(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t)})
	a := e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":4},{"item_id":3,"quantity":1}],"ttl":"2m"}`)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	var h holdAnswer
	decode(t, a, &h)
	assert.Equal(t, models.HoldActive, h.Status)
	assert.WithinDuration(t, time.Now().Add(2*time.Minute), h.ExpiresAt, 30*time.Second)
	assert.Len(t, h.Lines, 2)
	assert.Contains(t, string(e.do("GET", "/api/stats", "").body), `"held_units":4`)

	sold := e.do("POST", "/api/items/3/purchase", `{"quantity":1}`)
	assert.Equal(t, http.StatusConflict, sold.status, "held units are not for sale: %s", sold.body)
	short := e.do("POST", "/api/holds", `{"lines":[{"item_id":3,"quantity":1}]}`)
	assert.Equal(t, http.StatusConflict, short.status)
	assert.Contains(t, string(short.body), `"lines":[{"item_id":3,"requested":1,"available":0}]`)

	path := fmt.Sprintf("/api/holds/%d", h.ID)
	c1 := e.do("POST", path+"/confirm", "")
	require.Equal(t, http.StatusCreated, c1.status, "%s", c1.body)
	var order cartAnswer
	decode(t, c1, &order)
	assert.Equal(t, h.ID, order.HoldID)
	c2 := e.do("POST", path+"/confirm", "")
	require.Equal(t, http.StatusOK, c2.status)
	assert.JSONEq(t, string(c1.body), string(c2.body))
	var got holdAnswer
	decode(t, e.do("GET", path, ""), &got)
	assert.Equal(t, models.HoldConfirmed, got.Status)
	assert.Equal(t, order.OrderID, got.OrderID)
	del := e.do("DELETE", path, "")
	assert.Equal(t, http.StatusConflict, del.status)
	assert.Equal(t, "hold_not_active", del.errorCode())

	// Cancel: 204, twice; the units come back.
	decode(t, e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":6}]}`), &h)
	for range 2 {
		assert.Equal(t, http.StatusNoContent, e.do("DELETE", fmt.Sprintf("/api/holds/%d", h.ID), "").status)
	}
	assert.Contains(t, string(e.do("GET", "/api/items/1", "").body), `"stock":6`)
	assert.Equal(t, http.StatusConflict, e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h.ID), "").status)

	// Expiry: the shortest ttl, then confirm is 410.
	decode(t, e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":6}],"ttl":"1s"}`), &h)
	time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
	decode(t, e.do("GET", fmt.Sprintf("/api/holds/%d", h.ID), ""), &got)
	assert.Equal(t, models.HoldExpired, got.Status)
	gone := e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h.ID), "")
	assert.Equal(t, http.StatusGone, gone.status)
	assert.Equal(t, "hold_expired", gone.errorCode())
	assert.Contains(t, string(e.do("GET", "/api/items/1", "").body), `"stock":6`)

	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}],"ttl":"500ms"}`, 400, "invalid_request"},
		{"POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}],"ttl":"2h"}`, 400, "invalid_request"},
		{"POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}],"ttl":60}`, 400, "invalid_request"},
		{"POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}],"ttl":"soon"}`, 400, "invalid_request"},
		{"POST", "/api/holds", `{"lines":[{"item_id":99,"quantity":1}]}`, 404, "not_found"},
		{"POST", "/api/holds", `{"lines":[]}`, 400, "invalid_request"},
		{"GET", "/api/holds/0", "", 400, "invalid_request"},
		{"GET", "/api/holds/abc", "", 400, "invalid_request"},
		{"GET", "/api/holds/999", "", 404, "not_found"},
		{"POST", "/api/holds/999/confirm", "", 404, "not_found"},
		{"DELETE", "/api/holds/999", "", 404, "not_found"},
		{"PUT", "/api/holds/1", "", 405, "method_not_allowed"},
	} {
		a := e.do(tc.method, tc.path, tc.body)
		assert.Equal(t, tc.status, a.status, "%s %s %s: %s", tc.method, tc.path, tc.body, a.body)
		assert.Equal(t, tc.code, a.errorCode(), "%s %s", tc.method, tc.path)
	}
}
