package scenario

import (
	"context"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
)

// holdKeyProxies stand in front of the storefronts as a balancer would. Every third hold
// placement key, the first time it is seen, is forwarded and its answer replaced by a 504 (the
// hold is placed, its answer lost). With forget set, every later placement under a key already
// seen reaches the storefront without its Idempotency-Key: a server that ignores the key, which
// holds again.
type holdKeyProxies struct {
	forget bool
	mu     sync.Mutex
	seen   map[string]bool
	lost   int
}

func (p *holdKeyProxies) start(t *testing.T, targets []string) []string {
	t.Helper()
	p.seen = map[string]bool{}
	urls := make([]string, len(targets))
	for i, target := range targets {
		u, err := url.Parse(target)
		require.NoError(t, err)
		rp := httputil.NewSingleHostReverseProxy(u)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			if r.Method != http.MethodPost || r.URL.Path != "/api/holds" || key == "" {
				rp.ServeHTTP(w, r)
				return
			}
			p.mu.Lock()
			first := !p.seen[key]
			p.seen[key] = true
			lose := first && fnvMod(key, 3) == 0
			if lose {
				p.lost++
			}
			p.mu.Unlock()
			if !first && p.forget {
				r.Header.Del("Idempotency-Key")
			}
			if !lose {
				rp.ServeHTTP(w, r)
				return
			}
			rp.ServeHTTP(httptest.NewRecorder(), r) // placed; its answer dropped
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = w.Write([]byte(`{"error":{"code":"gateway_timeout","message":"the upstream's answer was lost"}}`))
		}))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	return urls
}

func fnvMod(s string, n uint32) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32() % n
}

// TestHoldKeysLostAnswers runs the hold workload behind balancers that lose the answer of a
// third of the placements after the storefront placed them: each is replayed under its key
// after the run and answered 200 with the hold the lost attempt placed, nothing set aside
// twice (one hold per key on the servers); then behind balancers that drop the key of every
// retry, as a server that ignored it would behave: the storefronts hold again, and the check
// finds it (DOUBLE HOLDS counted, ORDER MISMATCH).
func TestHoldKeysLostAnswers(t *testing.T) {
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 2})
	require.NoError(t, err)
	defer cl.Close()

	run := func(p *holdKeyProxies) (res map[string]verdict.Findings, c map[string]int) {
		cfg := cartRunConfig(config.WorkloadHolds, "guard")
		cfg.Instances, cfg.Stock, cfg.Requests, cfg.Retry = 2, 1000, 120, 0.3
		require.NoError(t, validate(&cfg))
		rep, err := RunTargets(ctx, cfg, p.start(t, cl.URLs()), cl.AdminToken, cl, testkit.Tlog{T: t})
		require.NoError(t, err)
		s := byStrategy(t, rep)["guard"]
		require.NotNil(t, s.Carts)
		t.Logf("forget %v: %+v; holds: %d keys, %d on the servers, %d double; %v", p.forget, *s.Carts, s.HoldKeys, s.ServerHolds, s.DoubleHolds, s.Violations)
		return map[string]verdict.Findings{"guard": s.Findings}, map[string]int{
			"lost": s.Carts.Lost, "recovered": s.Carts.Recovered, "retried": s.Carts.Retried, "replays": s.Carts.KeyReplays,
			"exit": rep.ExitCode, "proxy_lost": p.lost}
	}

	f, c := run(&holdKeyProxies{})
	g := f["guard"]
	assert.Equal(t, verdict.Safe, g.Verdict(), "%v", g.Violations)
	assert.Positive(t, c["lost"], "placements whose every answer was lost (a retry's copy may have answered the others)")
	assert.LessOrEqual(t, c["lost"], c["proxy_lost"])
	assert.Equal(t, c["lost"], c["recovered"], "every lost placement was answered by its replay")
	assert.Positive(t, c["retried"], "-retry sent placements twice")
	assert.GreaterOrEqual(t, c["replays"], c["lost"], "each lost placement's replay answered 200 (the hold it had placed)")
	assert.Zero(t, g.DoubleHolds)
	assert.Positive(t, g.HoldKeys)
	assert.Equal(t, g.HoldKeys, g.ServerHolds, "one hold on the servers per key answered")
	assert.Equal(t, 0, c["exit"])

	f, c = run(&holdKeyProxies{forget: true})
	g = f["guard"]
	assert.Positive(t, g.DoubleHolds, "a retry without its key holds again: %v", g.Violations)
	assert.Greater(t, g.ServerHolds, g.HoldKeys)
	assert.Equal(t, verdict.OrderMismatch, g.Verdict())
	assert.Equal(t, 1, c["exit"], "guard is expected safe: the run fails")
}
