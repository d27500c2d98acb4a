package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

type readiness struct {
	Status string `json:"status"`
	Checks []struct {
		Name string `json:"name"`
		OK   bool   `json:"ok"`
	} `json:"checks"`
}

// checkNames returns the names of the readiness checks that answered, and fails t on one
// that did not.
func checkNames(t *testing.T, r readiness) []string {
	t.Helper()
	var names []string
	for _, c := range r.Checks {
		assert.True(t, c.OK, c.Name)
		names = append(names, c.Name)
	}
	return names
}

// The storefront runs through Sentinel (master_name URL) and on a Cluster (--redis-cluster):
// /readyz lists every node it was configured with, and lock+guard sells, its lock and fence
// keys under one hash tag on the cluster.
func TestServeSentinelAndCluster(t *testing.T) {
	t.Run("sentinel", func(t *testing.T) {
		set := redistest.StartSentinel(t)
		s := startServer(t, nil, append(baseArgs(t), "--redis", set.URL())...)
		var r readiness
		require.Equal(t, http.StatusOK, s.call("GET", "/readyz", "", &r))
		names := checkNames(t, r)
		assert.Contains(t, names, "redis master stockguard (via sentinel)")
		for _, addr := range set.SentinelAddrs() {
			assert.Contains(t, names, "redis sentinel "+addr)
		}
		assert.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil))
		assert.Equal(t, 0, s.shutdown())
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		s := startServer(t, nil, append(baseArgs(t), "--redis", cl.URL(), "--redis-cluster")...)
		var r readiness
		require.Equal(t, http.StatusOK, s.call("GET", "/readyz", "", &r))
		names := checkNames(t, r)
		assert.Contains(t, names, "redis cluster masters")
		for _, addr := range cl.Addrs() {
			assert.Contains(t, names, "redis cluster node "+addr)
		}
		var rec inventory.Receipt
		require.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &rec))
		rdb := redistest.ClusterClient(t, cl)
		keys := locking.KeysOf(inventory.LockKeyPrefix, inventory.ItemLockName(1))
		fence, err := rdb.Get(context.Background(), keys.Fence).Int64()
		require.NoError(t, err)
		assert.Equal(t, rec.FenceToken, fence, "the fencing counter lives on the cluster")
		assert.Equal(t, 0, s.shutdown())
	})
}

// A master_name URL under --redis-cluster is a configuration error, named at start.
func TestRedisKindConflict(t *testing.T) {
	var out strings.Builder
	code := run(context.Background(), append(baseArgs(t), "--redis", "redis://127.0.0.1:1?master_name=m", "--redis-cluster"),
		func(string) string { return "" }, &out)
	assert.Equal(t, 2, code)
	assert.Contains(t, out.String(), "master_name")
	_, err := redisKindOf("redis://127.0.0.1:1?addr=127.0.0.1:2", false)
	require.NoError(t, err)
}

// With --on-redis-down=guard, a storefront whose Redis is gone keeps selling lock+guard through
// the guard alone: 201 with "degraded": true, counted in /metrics; lock still answers 503; and
// once Redis is back, purchases take the lock again.
func TestServeOnRedisDownGuard(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--redis", srv.URL(), "--on-redis-down", "guard", "--max-inflight-per-item", "8")...)
	var rec map[string]any
	require.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &rec))
	assert.Nil(t, rec["degraded"], "sold under the lock: no degraded field")

	srv.Stop()
	assert.Equal(t, http.StatusServiceUnavailable, s.call("GET", "/readyz", "", nil))
	rec = nil
	require.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &rec))
	assert.Equal(t, true, rec["degraded"])
	assert.EqualValues(t, 0, rec["fence_token"])
	assert.Equal(t, "lock+guard", rec["strategy"])
	assert.Equal(t, http.StatusServiceUnavailable, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil, "X-Strategy: lock"))
	assert.Contains(t, metricsText(t, s), `stockguard_purchases_degraded_total{strategy="lock+guard"} 1`)

	srv.Restart(t)
	require.Eventually(t, func() bool {
		rec = nil
		return s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &rec) == http.StatusCreated && rec["degraded"] == nil
	}, 10*time.Second, 100*time.Millisecond, "back to the lock once Redis answers")
	assert.Equal(t, 0, s.shutdown())
}

func metricsText(t *testing.T, s *server) string {
	t.Helper()
	res, err := http.Get(s.url + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// --lock-replicas 1: through Sentinel (a master with one replica) lock+guard sells, each
// lock acknowledged by the replica; on a Redis without replicas every lock is given back and
// the purchase is answered 503 lock_not_replicated once --lock-wait ends.
func TestServeLockReplicas(t *testing.T) {
	t.Run("replicated", func(t *testing.T) {
		set := redistest.StartSentinel(t)
		s := startServer(t, nil, append(baseArgs(t), "--redis", set.URL(), "--lock-replicas", "1")...)
		assert.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil))
		assert.Equal(t, 0, s.shutdown())
	})
	t.Run("no replica", func(t *testing.T) {
		srv := redistest.Start(t)
		s := startServer(t, nil, append(baseArgs(t), "--redis", srv.URL(), "--lock-replicas", "1",
			"--lock-wait", "300ms")...)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		assert.Equal(t, http.StatusServiceUnavailable, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &e))
		assert.Equal(t, "lock_not_replicated", e.Error.Code)
		assert.Equal(t, 0, s.shutdown())
	})
}
