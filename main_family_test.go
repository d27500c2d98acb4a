package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// TestServeRedlockAndAdmission starts the server with three --redis URLs, which offers
// redlock+guard over the three nodes, and with an admission limit of one purchase in flight
// per item: concurrent slow purchases of one item are turned away with 429 overloaded and
// Retry-After, and nothing is oversold.
func TestServeRedlockAndAdmission(t *testing.T) {
	nodes := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	s := startServer(t, nil, append(baseArgs(t),
		"--redis", strings.Join(urls, ","), "--max-inflight-per-item", "1")...)

	var r struct {
		FenceToken int64  `json:"fence_token"`
		Strategy   string `json:"strategy"`
	}
	require.Equal(t, http.StatusCreated,
		s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &r, "X-Strategy: redlock+guard"))
	assert.Equal(t, "redlock+guard", r.Strategy)
	assert.Positive(t, r.FenceToken)
	// The token was written back to every node of the quorum (at least two of three).
	written := 0
	for _, n := range nodes {
		v, err := n.Client(t).Get(context.Background(), "stockguard:redlock:{item:1}:fence").Int64()
		if err == nil && v == r.FenceToken {
			written++
		}
	}
	assert.GreaterOrEqual(t, written, 2, "fence written back to a quorum")

	// One purchase in flight per item: of 8 slow concurrent purchases some are shed with 429.
	codes := buyConcurrently(s, 2, 8, "X-Simulated-Work: 300ms")
	assert.Positive(t, codes[http.StatusTooManyRequests], "codes: %v", codes)
	assert.Positive(t, codes[http.StatusCreated], "codes: %v", codes)
	assert.Equal(t, 8, codes[http.StatusTooManyRequests]+codes[http.StatusCreated], "codes: %v", codes)

	var stats []struct {
		ItemID        int64 `json:"item_id"`
		SoldUnits     int   `json:"sold_units"`
		OversoldUnits int   `json:"oversold_units"`
	}
	require.Equal(t, http.StatusOK, s.call("GET", "/api/stats", "", &stats))
	for _, st := range stats {
		assert.Zero(t, st.OversoldUnits, "item %d", st.ItemID)
		if st.ItemID == 2 {
			assert.Equal(t, codes[http.StatusCreated], st.SoldUnits)
		}
	}
	assert.Equal(t, 0, s.shutdown())
}

// TestRedlockNeedsSeveralURLs: with one Redis, redlock+guard is not offered.
func TestRedlockNeedsSeveralURLs(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--redis", rs.URL())...)
	assert.Equal(t, http.StatusBadRequest,
		s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil, "X-Strategy: redlock+guard"))
	assert.Equal(t, 0, s.shutdown())
}
