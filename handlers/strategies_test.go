package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

type strategyRow struct {
	Name           string `json:"name"`
	Safe           bool   `json:"safe"`
	TakesLock      bool   `json:"takes_lock"`
	DemoOnly       bool   `json:"demo_only"`
	RedisKeyPrefix string `json:"redis_key_prefix"`
	Default        bool   `json:"default"`
}

func strategiesOf(t *testing.T, e *env) map[string]strategyRow {
	t.Helper()
	a := e.do(http.MethodGet, "/api/strategies", "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	var rows []strategyRow
	require.NoError(t, json.Unmarshal(a.body, &rows))
	m := map[string]strategyRow{}
	for _, r := range rows {
		m[r.Name] = r
	}
	return m
}

// GET /api/strategies tells which strategies take a per-item Redis lock.
func TestStrategiesTakesLock(t *testing.T) {
	rows := strategiesOf(t, newEnv(t, envOptions{redis: redistest.Start(t)}))
	for name, takes := range map[string]bool{
		inventory.StrategyNaive: false, inventory.StrategyGuard: false, inventory.StrategyLocal: false,
		inventory.StrategyLock: true, inventory.StrategyLockGuard: true,
	} {
		require.Contains(t, rows, name)
		assert.Equal(t, takes, rows[name].TakesLock, name)
	}
	a := newEnv(t, envOptions{}).do(http.MethodGet, "/api/strategies", "")
	assert.Contains(t, string(a.body), `"takes_lock":false`, "the field is always there")
}
