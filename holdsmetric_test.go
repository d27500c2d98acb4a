package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// /metrics exports the overdue holds: none while a hold is active and in time.
func TestMetricsExportOverdueHolds(t *testing.T) {
	srv := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--redis", srv.URL())...)
	assert.Contains(t, metricsText(t, s), "stockguard_holds_overdue 0")
	require.Equal(t, http.StatusCreated, s.call("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`, nil))
	assert.Contains(t, metricsText(t, s), "stockguard_holds_overdue 0")
	assert.Equal(t, 0, s.shutdown())
}
