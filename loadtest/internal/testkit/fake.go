// Package testkit holds what the load test's tests share: a fake storefront speaking the HTTP
// contract, the storefront binary built once per test binary, and helpers on the processes a
// run starts. Only tests import it.
package testkit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Fake is an in-memory storefront speaking the HTTP contract, for tests of the report and
// verdict logic that need no real server. "naive" reads, works and writes the stock it read (so
// it oversells); every other strategy works, then decides on the current stock. One key never
// gets two orders. Faults can be injected.
type Fake struct {
	mu       sync.Mutex
	token    string
	demo     bool
	items    []*fakeItem
	orders   []client.Order
	byKey    map[string]client.Receipt
	nextID   int64
	WrongStr string // when set, 201s name this strategy instead of the asked one
	Ghost    bool   // when set, every 10th purchase also writes an order nobody was answered
	Liar     bool   // when set, every 5th purchase is answered sold out while stock remains (the checked history must see it)
	calls    int
}

type fakeItem struct {
	ID, Initial, Stock int
	SKU                string
}

// fakeStrategies is the fake's answer to GET /api/strategies.
var fakeStrategies = []map[string]any{
	{"name": "naive", "safe": false, "takes_lock": false, "demo_only": false},
	{"name": "local", "safe": false, "takes_lock": false, "demo_only": false},
	{"name": "lock", "safe": false, "takes_lock": true, "demo_only": false},
	{"name": "guard", "safe": true, "takes_lock": false, "demo_only": false},
	{"name": "lock+guard", "safe": true, "takes_lock": true, "demo_only": false, "default": true},
}

// NewFake starts a fake storefront (in demo mode: it takes X-Strategy) whose admin token is
// "t0k"; the test's cleanup stops it.
func NewFake(tb testing.TB, demo bool) (*Fake, *httptest.Server) {
	tb.Helper()
	f := &Fake{token: "t0k", demo: demo, byKey: map[string]client.Receipt{}}
	srv := httptest.NewServer(f)
	tb.Cleanup(srv.Close)
	return f, srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": code}})
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/readyz":
		writeJSON(w, 200, map[string]string{"status": "ok"})
	case p == "/api/debug/locks":
		if !f.demo {
			writeErr(w, 404, "not_found")
			return
		}
		writeJSON(w, 200, map[string]any{"pid": 1, "locks": []any{}})
	case p == "/api/strategies":
		writeJSON(w, 200, fakeStrategies)
	case p == "/api/admin/reset":
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			writeErr(w, 401, "unauthorized")
			return
		}
		var body struct{ Items []client.NewItem }
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.items, f.orders, f.byKey = nil, nil, map[string]client.Receipt{}
		for i, it := range body.Items {
			f.items = append(f.items, &fakeItem{ID: 100 + i, Initial: it.Stock, Stock: it.Stock, SKU: it.SKU})
		}
		f.mu.Unlock()
		writeJSON(w, 200, map[string]string{"status": "ok"})
	case p == "/api/items":
		f.mu.Lock()
		var out []client.Item
		for _, it := range f.items {
			out = append(out, client.Item{ID: int64(it.ID), SKU: it.SKU, Stock: it.Stock})
		}
		f.mu.Unlock()
		writeJSON(w, 200, out)
	case p == "/api/stats":
		f.mu.Lock()
		var out []client.ItemStats
		for _, it := range f.items {
			s := client.ItemStats{ItemID: int64(it.ID), SKU: it.SKU, InitialStock: it.Initial, Stock: it.Stock}
			for _, o := range f.orders {
				if o.ItemID == int64(it.ID) {
					s.SoldUnits += o.Quantity
					s.OrderCount++
				}
			}
			s.OversoldUnits = max(0, s.SoldUnits-s.InitialStock)
			out = append(out, s)
		}
		f.mu.Unlock()
		writeJSON(w, 200, out)
	case p == "/api/orders":
		after, _ := strconv.ParseInt(r.URL.Query().Get("after_id"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		f.mu.Lock()
		out := []client.Order{}
		for _, o := range f.orders {
			if o.OrderID > after && len(out) < limit {
				out = append(out, o)
			}
		}
		f.mu.Unlock()
		writeJSON(w, 200, out)
	case strings.HasSuffix(p, "/purchase"):
		f.purchase(w, r)
	case strings.HasPrefix(p, "/api/items/"):
		id, _ := strconv.Atoi(strings.TrimPrefix(p, "/api/items/"))
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, it := range f.items {
			if it.ID == id {
				writeJSON(w, 200, client.Item{ID: int64(it.ID), SKU: it.SKU, Stock: it.Stock})
				return
			}
		}
		writeErr(w, 404, "not_found")
	default:
		writeErr(w, 404, "not_found")
	}
}

func (f *Fake) purchase(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(strings.Split(r.URL.Path, "/")[3])
	var body struct{ Quantity int }
	_ = json.NewDecoder(r.Body).Decode(&body)
	strategy := r.Header.Get("X-Strategy")
	if !f.demo {
		if strategy != "" || r.Header.Get("X-Simulated-Work") != "" {
			writeErr(w, 400, "invalid_request")
			return
		}
		strategy = "lock+guard"
	}
	work, _ := time.ParseDuration(r.Header.Get("X-Simulated-Work"))
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	if rc, ok := f.byKey[key]; ok {
		f.mu.Unlock()
		writeJSON(w, 200, rc)
		return
	}
	var it *fakeItem
	for _, x := range f.items {
		if x.ID == id {
			it = x
		}
	}
	if it == nil {
		f.mu.Unlock()
		writeErr(w, 404, "not_found")
		return
	}
	stock := it.Stock
	f.calls++
	lie := f.Liar && f.calls%5 == 0
	f.mu.Unlock()
	if stock < body.Quantity || lie {
		writeErr(w, 409, "sold_out")
		return
	}
	time.Sleep(work) // naive: between its read and its write; the others: before they decide
	if f.demo {      // like the storefront: the work spent, on every answer after it
		w.Header().Set("Server-Timing", "work;dur="+strconv.FormatFloat(float64(work)/1e6, 'f', 3, 64)+", lock;dur=0")
	}
	f.mu.Lock()
	if rc, ok := f.byKey[key]; ok { // a concurrent request with this key won
		f.mu.Unlock()
		writeJSON(w, 200, rc)
		return
	}
	if strategy != "naive" { // exact: decide on the current stock
		if stock = it.Stock; stock < body.Quantity {
			f.mu.Unlock()
			writeErr(w, 409, "sold_out")
			return
		}
	}
	it.Stock = stock - body.Quantity
	f.nextID++
	named := strategy
	if f.WrongStr != "" {
		named = f.WrongStr
	}
	k := key
	o := client.Order{OrderID: f.nextID, ItemID: int64(id), Quantity: body.Quantity, Strategy: named, IdempotencyKey: &k}
	f.orders = append(f.orders, o)
	rc := client.Receipt{OrderID: o.OrderID, ItemID: o.ItemID, Quantity: o.Quantity, Remaining: it.Stock, Strategy: named}
	f.byKey[key] = rc
	if f.Ghost && f.nextID%10 == 0 {
		f.nextID++
		gk := key + "-ghost"
		f.orders = append(f.orders, client.Order{OrderID: f.nextID, ItemID: int64(id), Quantity: 0, Strategy: named, IdempotencyKey: &gk})
	}
	f.mu.Unlock()
	writeJSON(w, 201, rc)
}
