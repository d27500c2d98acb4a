package scenario

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/chash"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
)

// TestFakeRouteItem runs guard and lock+guard both ways over three servers (one fake store):
// routed by item, every purchase of an item, -retry copies included, reaches the server nginx's
// consistent hash picks; round-robin, the hot item reaches every server. The rows name their
// route, and the table shows the mean batch and the ratios per route.
func TestFakeRouteItem(t *testing.T) {
	f, _ := testkit.NewFake(t, true)
	type hit struct {
		server int
		item   string
		key    string
	}
	var mu sync.Mutex
	var hits []hit
	urls := make([]string, 3)
	hosts := make([]string, 3)
	for i := range urls {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if parts := strings.Split(r.URL.Path, "/"); len(parts) == 5 && parts[4] == "purchase" {
				mu.Lock()
				hits = append(hits, hit{i, parts[3], r.Header.Get("Idempotency-Key")})
				mu.Unlock()
			}
			f.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
		u, err := url.Parse(srv.URL)
		require.NoError(t, err)
		hosts[i] = u.Host
	}
	cfg := fakeConfig("guard", "lock+guard")
	cfg.Items, cfg.Stock, cfg.Hot = 8, 30, 0.5
	cfg.Routes = []string{config.RouteItem, config.RouteRoundRobin}
	rep, err := RunTargets(context.Background(), cfg, urls, "t0k", nil, nil)
	require.NoError(t, err)
	require.Len(t, rep.Strategies, 4)
	var labels []string
	for _, s := range rep.Strategies {
		labels = append(labels, s.Label())
		assert.Equal(t, verdict.Safe, s.Verdict, s.Label())
	}
	assert.Equal(t, []string{"guard @item", "lock+guard @item", "guard @round-robin", "lock+guard @round-robin"}, labels)

	// The keys are lt-<seed>-<round>-<strategy>-<n>: rounds 0 and 1 are routed by item.
	ring := chash.New(hosts)
	servers := map[int]map[string]map[int]bool{} // round -> item -> servers reached
	for _, h := range hits {
		round, err := strconv.Atoi(strings.Split(h.key, "-")[2])
		require.NoError(t, err, h.key)
		if servers[round] == nil {
			servers[round] = map[string]map[int]bool{}
		}
		if servers[round][h.item] == nil {
			servers[round][h.item] = map[int]bool{}
		}
		servers[round][h.item][h.server] = true
	}
	require.Len(t, servers, 4)
	reached := map[int]bool{}
	for _, round := range []int{0, 1} {
		require.Len(t, servers[round], cfg.Items, "round %d: every item bought", round)
		for item, s := range servers[round] {
			assert.Equal(t, map[int]bool{ring.Pick(item): true}, s, "round %d, item %s", round, item)
			reached[ring.Pick(item)] = true
		}
	}
	assert.Greater(t, len(reached), 1, "the items spread over the servers")
	for _, round := range []int{2, 3} {
		hot := strconv.FormatInt(minItem(servers[round]), 10)
		assert.Len(t, servers[round][hot], 3, "round %d: round-robin, the hot item reaches every server", round)
	}

	var buf bytes.Buffer
	rep.WriteTable(&buf)
	out := buf.String()
	assert.Contains(t, out, "route item and round-robin")
	assert.Contains(t, out, "batch")
	assert.Contains(t, out, "route item: lock+guard / guard: req/s ")
	assert.Contains(t, out, "route round-robin: lock+guard / guard: req/s ")

	// A strategy expected to break across processes that stays SAFE routed by item is named
	// as such, once (the fake has no processes: local is SAFE both ways here).
	cfg = fakeConfig("local")
	cfg.Routes = []string{config.RouteItem, config.RouteRoundRobin}
	rep, err = RunTargets(context.Background(), cfg, urls, "t0k", nil, nil)
	require.NoError(t, err)
	buf.Reset()
	rep.WriteTable(&buf)
	assert.Contains(t, buf.String(), "\nlocal @item stayed SAFE routed by item: ")
	assert.Equal(t, 1, strings.Count(buf.String(), "stayed SAFE"), buf.String())
}

func minItem(items map[string]map[int]bool) int64 {
	var low int64
	for k := range items {
		id, _ := strconv.ParseInt(k, 10, 64)
		if low == 0 || id < low {
			low = id
		}
	}
	return low
}
