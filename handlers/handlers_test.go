package handlers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
)

// TestBadRequests sends requests the handlers must refuse before calling the service.
func TestBadRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	demo := newEnv(t, envOptions{demo: true})
	const buy = "/api/items/1/purchase"
	tests := []struct {
		name    string
		env     *env
		method  string
		path    string
		body    string
		headers []string
		status  int
		code    string
	}{
		{"empty body", e, "POST", buy, "", nil, 400, "invalid_request"},
		{"not JSON", e, "POST", buy, "quantity=1", nil, 400, "invalid_request"},
		{"truncated JSON", e, "POST", buy, `{"quantity":1`, nil, 400, "invalid_request"},
		{"array", e, "POST", buy, `[1]`, nil, 400, "invalid_request"},
		{"null", e, "POST", buy, `null`, nil, 400, "invalid_request"},
		{"unknown field", e, "POST", buy, `{"quantity":1,"price":0}`, nil, 400, "invalid_request"},
		{"trailing object", e, "POST", buy, `{"quantity":1}{"quantity":2}`, nil, 400, "invalid_request"},
		{"trailing garbage", e, "POST", buy, `{"quantity":1} x`, nil, 400, "invalid_request"},
		{"missing quantity", e, "POST", buy, `{}`, nil, 400, "invalid_request"},
		{"null quantity", e, "POST", buy, `{"quantity":null}`, nil, 400, "invalid_request"},
		{"fraction", e, "POST", buy, `{"quantity":1.5}`, nil, 400, "invalid_request"},
		{"integral fraction", e, "POST", buy, `{"quantity":1.0}`, nil, 400, "invalid_request"},
		{"exponent", e, "POST", buy, `{"quantity":1e3}`, nil, 400, "invalid_request"},
		{"string", e, "POST", buy, `{"quantity":"3"}`, nil, 400, "invalid_request"},
		{"zero", e, "POST", buy, `{"quantity":0}`, nil, 400, "invalid_request"},
		{"negative", e, "POST", buy, `{"quantity":-1}`, nil, 400, "invalid_request"},
		{"over 1000", e, "POST", buy, `{"quantity":1001}`, nil, 400, "invalid_request"},
		{"huge", e, "POST", buy, `{"quantity":99999999999999999999999999}`, nil, 400, "invalid_request"},
		{"bool", e, "POST", buy, `{"quantity":true}`, nil, 400, "invalid_request"},
		{"id not a number", e, "POST", "/api/items/abc/purchase", `{"quantity":1}`, nil, 400, "invalid_request"},
		{"id zero", e, "GET", "/api/items/0", "", nil, 400, "invalid_request"},
		{"id negative", e, "GET", "/api/items/-1", "", nil, 400, "invalid_request"},
		{"id plus", e, "GET", "/api/items/+1", "", nil, 400, "invalid_request"},
		{"id overflow", e, "GET", "/api/items/9223372036854775808", "", nil, 400, "invalid_request"},
		{"empty idempotency key", e, "POST", buy, `{"quantity":1}`, []string{"Idempotency-Key:"}, 400, "invalid_request"},
		{"long idempotency key", e, "POST", buy, `{"quantity":1}`, []string{"Idempotency-Key: " + strings.Repeat("k", 129)}, 400, "invalid_request"},
		{"non-ASCII idempotency key", e, "POST", buy, `{"quantity":1}`, []string{"Idempotency-Key: clé"}, 400, "invalid_request"},
		{"two idempotency keys", e, "POST", buy, `{"quantity":1}`, []string{"Idempotency-Key: a", "Idempotency-Key: b"}, 400, "invalid_request"},
		{"strategy without demo", e, "POST", buy, `{"quantity":1}`, []string{"X-Strategy: guard"}, 400, "invalid_request"},
		{"work without demo", e, "POST", buy, `{"quantity":1}`, []string{"X-Simulated-Work: 1ms"}, 400, "invalid_request"},
		{"unknown strategy", demo, "POST", buy, `{"quantity":1}`, []string{"X-Strategy: yolo"}, 400, "invalid_request"},
		{"redlock not offered", demo, "POST", buy, `{"quantity":1}`, []string{"X-Strategy: redlock+guard"}, 400, "invalid_request"},
		{"work too long", demo, "POST", buy, `{"quantity":1}`, []string{"X-Simulated-Work: 1001ms"}, 400, "invalid_request"},
		{"work negative", demo, "POST", buy, `{"quantity":1}`, []string{"X-Simulated-Work: -1ms"}, 400, "invalid_request"},
		{"work not a duration", demo, "POST", buy, `{"quantity":1}`, []string{"X-Simulated-Work: 5"}, 400, "invalid_request"},
		{"orders limit 0", e, "GET", "/api/orders?limit=0", "", nil, 400, "invalid_request"},
		{"orders limit 1001", e, "GET", "/api/orders?limit=1001", "", nil, 400, "invalid_request"},
		{"orders item_id text", e, "GET", "/api/orders?item_id=x", "", nil, 400, "invalid_request"},
		{"orders after_id negative", e, "GET", "/api/orders?after_id=-1", "", nil, 400, "invalid_request"},
		{"reset bad body", e, "POST", "/api/admin/reset", `{"items":[{"sku":"a","colour":"red"}]}`, []string{"Authorization: Bearer " + testToken}, 400, "invalid_request"},
		{"reset no items", e, "POST", "/api/admin/reset", `{}`, []string{"Authorization: Bearer " + testToken}, 400, "invalid_request"},
		{"reset negative stock", e, "POST", "/api/admin/reset", `{"items":[{"sku":"a","name":"a","stock":-1,"price_cents":1}]}`, []string{"Authorization: Bearer " + testToken}, 400, "invalid_request"},
		{"unknown item", e, "GET", "/api/items/999", "", nil, 404, "not_found"},
		{"buy unknown item", e, "POST", "/api/items/999/purchase", `{"quantity":1}`, nil, 404, "not_found"},
		{"unknown route", e, "GET", "/api/nope", "", nil, 404, "not_found"},
		{"trailing slash", e, "GET", "/api/items/", "", nil, 404, "not_found"},
		{"debug without demo", e, "GET", "/api/debug/locks", "", nil, 404, "not_found"},
		{"GET purchase", e, "GET", buy, "", nil, 405, "method_not_allowed"},
		{"DELETE items", e, "DELETE", "/api/items", "", nil, 405, "method_not_allowed"},
		{"reset no token", e, "POST", "/api/admin/reset", `{"items":[]}`, nil, 401, "unauthorized"},
		{"reset wrong token", e, "POST", "/api/admin/reset", `{"items":[]}`, []string{"Authorization: Bearer nope"}, 401, "unauthorized"},
		{"reset basic auth", e, "POST", "/api/admin/reset", `{"items":[]}`, []string{"Authorization: Basic " + testToken}, 401, "unauthorized"},
		{"reset token prefix", e, "POST", "/api/admin/reset", `{"items":[]}`, []string{"Authorization: Bearer " + testToken[:4]}, 401, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.env.do(tt.method, tt.path, tt.body, tt.headers...)
			assert.Equal(t, tt.status, a.status, "body %s", a.body)
			assert.Equal(t, tt.code, a.errorCode(), "body %s", a.body)
			assert.Equal(t, "application/json; charset=utf-8", a.header.Get("Content-Type"))
		})
	}
	// Nothing above may have sold anything.
	a := e.do("GET", "/api/orders", "")
	assert.JSONEq(t, `[]`, string(a.body))
}

func TestMethodNotAllowedListsAllow(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.do("GET", "/api/items/1/purchase", "")
	require.Equal(t, http.StatusMethodNotAllowed, a.status)
	assert.Equal(t, "POST", a.header.Get("Allow"))
}

func TestPayloadTooLarge(t *testing.T) {
	e := newEnv(t, envOptions{})
	big := `{"quantity":1,"pad":"` + strings.Repeat("x", 9<<10) + `"}`

	t.Run("content length", func(t *testing.T) {
		a := e.do("POST", "/api/items/1/purchase", big)
		assert.Equal(t, http.StatusRequestEntityTooLarge, a.status)
		assert.Equal(t, "payload_too_large", a.errorCode())
	})
	t.Run("chunked", func(t *testing.T) {
		// No Content-Length: the limit is found while reading.
		req, err := http.NewRequest("POST", e.srv.URL+"/api/items/1/purchase", struct{ *strings.Reader }{strings.NewReader(big)})
		require.NoError(t, err)
		req.ContentLength = -1 // unknown: sent chunked
		a := e.send(req)
		assert.Equal(t, http.StatusRequestEntityTooLarge, a.status)
		assert.Equal(t, "payload_too_large", a.errorCode())
	})
	t.Run("whitespace under the limit is fine", func(t *testing.T) {
		body := `{"quantity":1}` + strings.Repeat(" ", 8<<10-20)
		a := e.do("POST", "/api/items/1/purchase", body)
		assert.Equal(t, http.StatusCreated, a.status, "body %s", a.body)
	})
}

func TestPurchaseAndStockErrors(t *testing.T) {
	e := newEnv(t, envOptions{})

	a := e.do("POST", "/api/items/1/purchase", `{"quantity":3}`)
	require.Equal(t, http.StatusCreated, a.status, "body %s", a.body)
	var r inventory.Receipt
	decode(t, a, &r)
	assert.Equal(t, int64(1), r.ItemID)
	assert.Equal(t, 3, r.Quantity)
	assert.Equal(t, 7, r.Remaining)
	assert.Equal(t, inventory.StrategyGuard, r.Strategy)
	assert.Positive(t, r.OrderID)
	assert.JSONEq(t, fmt.Sprintf(`{"order_id":%d,"item_id":1,"quantity":3,"remaining":7,"fence_token":%d,"strategy":"guard"}`, r.OrderID, r.FenceToken), string(a.body))

	a = e.do("POST", "/api/items/1/purchase", `{"quantity":8}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, "insufficient_stock", a.errorCode())

	a = e.do("POST", "/api/items/1/purchase", `{"quantity":7}`)
	assert.Equal(t, http.StatusCreated, a.status)
	a = e.do("POST", "/api/items/1/purchase", `{"quantity":1}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, "sold_out", a.errorCode())

	a = e.do("GET", "/api/items/1", "")
	require.Equal(t, http.StatusOK, a.status)
	assert.JSONEq(t, `{"id":1,"sku":"T-1","name":"ten","stock":0,"price_cents":100}`, string(a.body))

	a = e.do("GET", "/api/stats", "")
	require.Equal(t, http.StatusOK, a.status)
	var stats []inventory.ItemStats
	decode(t, a, &stats)
	require.Len(t, stats, len(testCatalogue))
	assert.Equal(t, inventory.ItemStats{ItemID: 1, SKU: "T-1", InitialStock: 10, Stock: 0, SoldUnits: 10, OrderCount: 2}, stats[0])
}

func TestIdempotentReplay(t *testing.T) {
	e := newEnv(t, envOptions{})
	key := "Idempotency-Key: order-42 with spaces"

	first := e.do("POST", "/api/items/1/purchase", `{"quantity":2}`, key)
	require.Equal(t, http.StatusCreated, first.status, "body %s", first.body)
	// Another purchase in between changes the stock; the replay still shows the original.
	require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`).status)

	again := e.do("POST", "/api/items/1/purchase", `{"quantity":2}`, key)
	assert.Equal(t, http.StatusOK, again.status)
	assert.JSONEq(t, string(first.body), string(again.body))

	conflict := e.do("POST", "/api/items/1/purchase", `{"quantity":3}`, key)
	assert.Equal(t, http.StatusUnprocessableEntity, conflict.status)
	assert.Equal(t, "idempotency_conflict", conflict.errorCode())

	var orders []map[string]any
	decode(t, e.do("GET", "/api/orders?item_id=1", ""), &orders)
	require.Len(t, orders, 2)
	assert.Equal(t, "order-42 with spaces", orders[0]["idempotency_key"])
	assert.Nil(t, orders[1]["idempotency_key"])
	assert.ElementsMatch(t, []string{"order_id", "item_id", "quantity", "lines", "strategy", "fence_token", "idempotency_key", "batch_id", "created_at"}, keys(orders[0]))

	var page []map[string]any
	decode(t, e.do("GET", fmt.Sprintf("/api/orders?after_id=%v&limit=1", orders[0]["order_id"]), ""), &page)
	require.Len(t, page, 1)
	assert.Equal(t, orders[1]["order_id"], page[0]["order_id"])
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestServiceErrors injects each service failure and checks its status, code and
// Retry-After; unexpected errors and panics are 500 internal without their details.
func TestServiceErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		err        error
		status     int
		code       string
		retryAfter bool
	}{
		{fmt.Errorf("%w: 12 in flight", inventory.ErrOverloaded), 429, "overloaded", true},
		{fmt.Errorf("%w: item 1", inventory.ErrLockTimeout), 503, "lock_timeout", true},
		{fmt.Errorf("%w: item 1", inventory.ErrLockLost), 503, "lock_lost", true},
		{fmt.Errorf("%w: item 1", inventory.ErrLockNotReplicated), 503, "lock_not_replicated", true},
		{fmt.Errorf("%w: dial tcp 10.0.0.1:6379: secret-host", inventory.ErrUnavailable), 503, "unavailable", true},
		{errors.New("database is on fire at /secret/path"), 500, "internal", false},
		{context.DeadlineExceeded, 503, "unavailable", true},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			e.wrap.purchase = func(context.Context, inventory.PurchaseRequest) (inventory.Receipt, error) {
				return inventory.Receipt{}, tt.err
			}
			a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`)
			assert.Equal(t, tt.status, a.status)
			assert.Equal(t, tt.code, a.errorCode())
			if tt.retryAfter {
				assert.Equal(t, "1", a.header.Get("Retry-After"))
			} else {
				assert.Empty(t, a.header.Get("Retry-After"))
			}
			assert.NotContains(t, string(a.body), "secret")
		})
	}

	t.Run("panic", func(t *testing.T) {
		e.wrap.purchase = func(context.Context, inventory.PurchaseRequest) (inventory.Receipt, error) {
			panic("secret panic value")
		}
		a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Request-ID: req-panic-1")
		assert.Equal(t, http.StatusInternalServerError, a.status)
		assert.Equal(t, "internal", a.errorCode())
		assert.NotContains(t, string(a.body), "secret")
		assert.Equal(t, "req-panic-1", a.header.Get("X-Request-ID"))
		// The server survives.
		e.wrap.purchase = nil
		assert.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`).status)
	})
}

func TestHealthAndReadiness(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.do("GET", "/healthz", "")
	assert.Equal(t, http.StatusOK, a.status)
	a = e.do("GET", "/readyz", "")
	assert.Equal(t, http.StatusOK, a.status, "body %s", a.body)

	e.wrap.ready = func(context.Context) error { return errors.New("redis: connection refused") }
	a = e.do("GET", "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Equal(t, "unavailable", a.errorCode())
	assert.NotContains(t, string(a.body), "refused")
}

func TestRequestID(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.do("GET", "/healthz", "", "X-Request-ID: abc-123")
	assert.Equal(t, "abc-123", a.header.Get("X-Request-ID"))
	a = e.do("GET", "/api/nope", "")
	assert.Len(t, a.header.Get("X-Request-ID"), 24, "a generated id on error answers too")
	b := e.do("GET", "/healthz", "", "X-Request-ID: "+strings.Repeat("x", 200))
	assert.Len(t, b.header.Get("X-Request-ID"), 24, "an over-long id is replaced")
}

func TestListItemsAndAdminReset(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.do("GET", "/api/items", "")
	require.Equal(t, http.StatusOK, a.status)
	assert.JSONEq(t, `[
		{"id":1,"sku":"T-1","name":"ten","stock":10,"price_cents":100},
		{"id":2,"sku":"T-2","name":"many","stock":1000000,"price_cents":200},
		{"id":3,"sku":"T-3","name":"one","stock":1,"price_cents":300}]`, string(a.body))
	require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/3/purchase", `{"quantity":1}`).status)

	a = e.do("POST", "/api/admin/reset", `{"items":[{"sku":"N-1","name":"new","stock":5,"price_cents":50}]}`,
		"Authorization: Bearer "+testToken)
	require.Equal(t, http.StatusOK, a.status, "body %s", a.body)
	var items []map[string]any
	decode(t, a, &items)
	require.Len(t, items, 1)
	assert.Equal(t, "N-1", items[0]["sku"])
	assert.EqualValues(t, 5, items[0]["stock"])

	assert.JSONEq(t, `[]`, string(e.do("GET", "/api/orders", "").body))
	decode(t, e.do("GET", "/api/items", ""), &items)
	assert.Len(t, items, 1)
}

func TestPurchaseBodyFieldNamesAreExact(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, body := range []string{`{"Quantity":1}`, `{"QUANTITY":1}`, `{"quantity":1,"quantity":1}`, `{"quantity":1,}`, `{,"quantity":1}`} {
		a := e.do("POST", "/api/items/1/purchase", body)
		assert.Equal(t, http.StatusBadRequest, a.status, body)
		assert.Equal(t, "invalid_request", a.errorCode(), body)
	}
	a := e.do("POST", "/api/items/1/purchase", " \n{ \"quantity\" : 2 }\n")
	assert.Equal(t, http.StatusCreated, a.status, "whitespace is fine: %s", a.body)
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAccessLogAndInternalDetails(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, envOptions{log: &logs})
	e.wrap.purchase = func(context.Context, inventory.PurchaseRequest) (inventory.Receipt, error) {
		return inventory.Receipt{}, errors.New("disk I/O error on /var/db/secret")
	}
	a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Request-ID: trace-77")
	require.Equal(t, http.StatusInternalServerError, a.status)
	assert.NotContains(t, string(a.body), "disk")

	out := logs.String()
	assert.Regexp(t, `level=ERROR msg="internal error" request_id=trace-77 err="disk I/O error on /var/db/secret"`, out)
	assert.Regexp(t, `level=WARN msg=request request_id=trace-77 method=POST path=/api/items/1/purchase status=500 .*code=internal`, out)
	e.do("GET", "/healthz", "", "X-Request-ID: trace-78")
	assert.Regexp(t, `level=INFO msg=request request_id=trace-78 method=GET path=/healthz status=200`, logs.String())
}
