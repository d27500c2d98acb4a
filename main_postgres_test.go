package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/pgproc"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// TestServePostgres runs the real server on a private PostgreSQL (DATABASE_URL) with a real
// redis-server: the storefront sells safely; when PostgreSQL goes away a purchase is 503
// unavailable in the one JSON error shape and /readyz says so; when it comes back, the same
// process sells again.
func TestServePostgres(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	pg, err := pgproc.Start(pgproc.Options{})
	require.NoError(t, err, "the PostgreSQL backend cannot start")
	t.Cleanup(pg.Close)
	url, err := pg.CreateDatabase(context.Background(), "e2e")
	require.NoError(t, err)
	rs := redistest.Start(t)

	args := []string{"--addr", "127.0.0.1:0", "--demo", "--admin-token", "e2e-token", "--shutdown-timeout", "10s",
		"--log-level", "warn", "--db-pool", "6", "--db-statement-timeout", "2s"}
	s := startServer(t, map[string]string{"DATABASE_URL": url, "REDIS_URL": rs.URL()}, args...)
	assert.Equal(t, "postgres", s.logs.field("database", "backend"))
	require.Equal(t, http.StatusOK, s.call("GET", "/readyz", "", nil))

	var items []item
	require.Equal(t, http.StatusOK, s.call("GET", "/api/items", "", &items))
	require.NotEmpty(t, items, "the demo catalogue was seeded")
	reset := `{"items":[{"sku":"PG","name":"pg","stock":10,"price_cents":1}]}`
	require.Equal(t, http.StatusOK, s.call("POST", "/api/admin/reset", reset, &items, "Authorization: Bearer e2e-token"))
	id := items[0].ID
	codes := buyConcurrently(s, id, 8, "X-Strategy: guard", "X-Simulated-Work: 2ms")
	assert.Equal(t, 8, codes[http.StatusCreated], "guard: codes %v", codes)
	codes = buyConcurrently(s, id, 8, "X-Strategy: lock+guard", "X-Simulated-Work: 2ms")
	assert.Equal(t, 2, codes[http.StatusCreated], "lock+guard: codes %v", codes)
	assert.Equal(t, 6, codes[http.StatusConflict], "lock+guard: codes %v", codes)
	var it item
	require.Equal(t, http.StatusOK, s.call("GET", fmt.Sprintf("/api/items/%d", id), "", &it))
	assert.Equal(t, 0, it.Stock, "16 buyers, 10 units")

	pg.Kill() // as in a crash: every connection is lost
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	code := s.call("POST", fmt.Sprintf("/api/items/%d/purchase", id), `{"quantity":1}`, &e, "X-Strategy: guard",
		"Idempotency-Key: pg-down-1")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "unavailable", e.Error.Code)
	assert.Equal(t, http.StatusServiceUnavailable, s.call("GET", "/readyz", "", nil))

	require.NoError(t, pg.Restart())
	// The pool meets its dead connections one by one (each answers 503 once): the admin
	// retries, as a client would.
	require.Eventually(t, func() bool {
		return s.call("POST", "/api/admin/reset", strings.Replace(reset, `"stock":10`, `"stock":3`, 1),
			nil, "Authorization: Bearer e2e-token") == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusOK, s.call("GET", "/api/items", "", &items))
	require.Len(t, items, 1)
	id = items[0].ID
	require.Eventually(t, func() bool {
		return s.call("POST", fmt.Sprintf("/api/items/%d/purchase", id), `{"quantity":1}`, nil,
			"Idempotency-Key: pg-back-1") == http.StatusCreated
	}, 10*time.Second, 50*time.Millisecond, "the same process sells again once PostgreSQL is back")
	require.Equal(t, http.StatusOK, s.call("GET", "/readyz", "", nil))
	assert.Equal(t, 0, s.shutdown())
}
