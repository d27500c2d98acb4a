//go:build nodemo

package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// Built without the demo, --demo is the storefront's own demo mode (X-Strategy,
// X-Simulated-Work, /api/debug/locks) with the shop page and no lab, and --instances is
// refused.
func TestNodemoBuild(t *testing.T) {
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"--demo", "--instances", "2"}, func(string) string { return "" }, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "-tags nodemo")
	stderr.Reset()
	code = run(t.Context(), []string{"--demo", "--strategy", "setnx-expire"}, func(string) string { return "" }, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), `unknown strategy "setnx-expire"`, "no demo strategies in this build")

	rs := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--redis", rs.URL())...)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	assert.Equal(t, 404, s.call("GET", "/api/lab", "", &e))
	assert.Equal(t, 404, s.call("GET", "/api/events", "", &e))
	var locks struct {
		Locks []any `json:"locks"`
	}
	assert.Equal(t, 200, s.call("GET", "/api/debug/locks", "", &locks))
	require.Equal(t, 201, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil, "X-Strategy: guard", "X-Simulated-Work: 1ms"))
	assert.Equal(t, 0, s.shutdown())
}
