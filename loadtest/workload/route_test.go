package workload

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
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

// routeRecorder is a storefront stand-in that records, per request, its path and its
// X-Route-Item header, and sells everything.
type routeRecorder struct {
	mu   sync.Mutex
	seen []routeSeen
}

type routeSeen struct{ path, route string }

func (rr *routeRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rr.mu.Lock()
	rr.seen = append(rr.seen, routeSeen{r.URL.Path, r.Header.Get(client.RouteHeader)})
	rr.mu.Unlock()
	w.Header().Set("Server-Timing", "work;dur=0.000, lock;dur=1.500")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"order_id":1,"lines":[],"strategy":"guard"}`))
}

func (rr *routeRecorder) requests() []routeSeen {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return slices.Clone(rr.seen)
}

// TestRouteCarts: every checkout and hold names its routing key, its lowest item, in
// X-Route-Item; routed by item every attempt of a cart (its -retry copy too) and every single
// purchase of the hot item reaches the instance nginx's hash gives that item, and round-robin
// the instance of its client; a single purchase sends no X-Route-Item (its path names the item).
func TestRouteCarts(t *testing.T) {
	recs := make([]*routeRecorder, 3)
	var apis []*client.API
	hc := client.NewHTTPClient(8, 5*time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	for i := range recs {
		recs[i] = &routeRecorder{}
		srv := httptest.NewServer(recs[i])
		t.Cleanup(srv.Close)
		apis = append(apis, &client.API{Base: srv.URL, HC: hc})
	}
	items := []client.Item{{ID: 3}, {ID: 4}, {ID: 5}, {ID: 6}, {ID: 7}, {ID: 8}}
	for _, route := range []string{config.RouteItem, config.RouteRoundRobin} {
		for _, rr := range recs {
			rr.mu.Lock()
			rr.seen = nil
			rr.mu.Unlock()
		}
		for _, wl := range []string{config.WorkloadCart, config.WorkloadHolds} {
			cfg := config.Config{Workload: wl, Hot: 0.5, Quantity: 2, Retry: 0.5, CartSingles: 0.3, HoldTTL: time.Second}
			w, err := New(cfg, apis, items, "guard", 0, "k", route)
			require.NoError(t, err)
			w.rec = nil
			rng := rand.New(rand.NewPCG(3, 4))
			for n := 0; n < 90; n++ {
				w.cartStep(context.Background(), rng, n, n%3)
			}
			singles, holds := 0, 0
			for _, c := range w.cartList {
				key := client.RouteItem(c.Lines)
				want := c.Instance
				if route == config.RouteItem {
					want = w.order[key][0]
				} else {
					assert.Contains(t, []int{0, 1, 2}, want)
				}
				assert.Equal(t, want, c.Instance, "%s: cart %s %v", route, c.Key, c.Lines)
				if c.Single {
					singles++
					assert.Equal(t, items[0].ID, key)
					assert.Len(t, c.Lines, 1)
				}
				for _, r := range c.Attempts {
					assert.Equal(t, 201, r.Status)
					assert.InDelta(t, 1.5, r.LockMS, 1e-9, "the lock wait is read from Server-Timing")
				}
			}
			for _, h := range w.holdList {
				holds++
				if route == config.RouteItem {
					assert.Equal(t, w.order[client.RouteItem(h.Lines)][0], h.Instance)
				}
			}
			if wl == config.WorkloadCart {
				assert.Positive(t, singles, "-cart-singles")
			} else {
				assert.Zero(t, singles, "single purchases are -workload cart's")
				assert.Positive(t, holds)
			}
		}
		// What the servers saw: the header on every checkout and placement; routed by item,
		// each routing key at one server only, the one its hash picks.
		order, err := itemOrders([]string{apis[0].Base, apis[1].Base, apis[2].Base}, items)
		require.NoError(t, err)
		at := map[string]map[int]bool{}
		for i, rr := range recs {
			for _, s := range rr.requests() {
				switch {
				case s.path == "/api/checkout" || s.path == "/api/holds":
					require.NotEmpty(t, s.route, "%s carries X-Route-Item", s.path)
					if at[s.route] == nil {
						at[s.route] = map[int]bool{}
					}
					at[s.route][i] = true
					if route == config.RouteItem {
						id, err := strconv.ParseInt(s.route, 10, 64)
						require.NoError(t, err)
						assert.Equal(t, order[id][0], i, "routing key %s at its instance", s.route)
					}
				case strings.HasSuffix(s.path, "/purchase"):
					assert.Equal(t, "/api/items/3/purchase", s.path, "single purchases are of the hot item")
					assert.Empty(t, s.route)
					if route == config.RouteItem {
						assert.Equal(t, order[3][0], i)
					}
				}
			}
		}
		for key, insts := range at {
			if route == config.RouteItem {
				assert.Len(t, insts, 1, "routing key %s", key)
			}
		}
		if route == config.RouteRoundRobin {
			assert.Len(t, at["3"], 3, "round-robin: the hot item's carts reach every instance")
		}
	}
}

// TestLockClass: the lock-wait classes of the report.
func TestLockClass(t *testing.T) {
	l := func(ids ...int64) []client.CartLine {
		var out []client.CartLine
		for _, id := range ids {
			out = append(out, client.CartLine{ItemID: id, Quantity: 1})
		}
		return out
	}
	assert.Equal(t, ClassSingle, lockClass(l(1), 1, true))
	assert.Equal(t, ClassHot, lockClass(l(1), 1, false))
	assert.Equal(t, ClassHotOther, lockClass(l(1, 4), 1, false))
	assert.Equal(t, ClassHotOther, lockClass(l(2, 1), 1, false))
	assert.Equal(t, ClassCold, lockClass(l(2, 4), 1, false))
	assert.Equal(t, int64(2), client.RouteItem(l(4, 2, 9)))
	assert.Zero(t, client.RouteItem(nil))
}
