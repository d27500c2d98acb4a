package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
)

type strategyRow struct {
	Name           string `json:"name"`
	Safe           bool   `json:"safe"`
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

// GET /api/strategies lists what the service offers: the demo-only strategies with --demo only.
func TestStrategiesListsDemoOnlyRowsInDemoMode(t *testing.T) {
	prod := strategiesOf(t, newEnv(t, envOptions{}))
	assert.True(t, prod[inventory.StrategyGuard].Safe)
	assert.True(t, prod[inventory.StrategyGuard].Default)
	for name, r := range prod {
		assert.False(t, r.DemoOnly, "%s offered without --demo", name)
	}

	demo := strategiesOf(t, newEnv(t, envOptions{demo: true}))
	for _, name := range []string{inventory.StrategySetnxExpire, inventory.StrategyDelRelease, inventory.StrategyFixedLease,
		inventory.StrategyOptimistic, inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyWatch} {
		require.Contains(t, demo, name)
		assert.True(t, demo[name].DemoOnly, name)
	}
	assert.False(t, demo[inventory.StrategyFixedLease].Safe)
	assert.True(t, demo[inventory.StrategyRedisStockGuard].Safe)
	assert.Equal(t, inventory.PitfallKeyPrefix(inventory.StrategySetnxExpire), demo[inventory.StrategySetnxExpire].RedisKeyPrefix)
	assert.Equal(t, inventory.StockKeyPrefix, demo[inventory.StrategyRedisStock].RedisKeyPrefix)
}

// A production server does not know the demo strategies at all: no X-Strategy outside demo
// mode; in demo mode a demo strategy whose lock is not wired answers unavailable.
func TestDemoStrategyOutsideDemo(t *testing.T) {
	prod := newEnv(t, envOptions{})
	a := prod.do(http.MethodPost, "/api/items/1/purchase", `{"quantity":1}`, "X-Strategy: redis-stock")
	assert.Equal(t, http.StatusBadRequest, a.status, "no X-Strategy outside demo mode")

	demo := newEnv(t, envOptions{demo: true})
	a = demo.do(http.MethodPost, "/api/items/1/purchase", `{"quantity":1}`, "X-Strategy: setnx-expire")
	assert.Equal(t, http.StatusServiceUnavailable, a.status, "no pitfall lock wired: unavailable, %s", a.body)
	assert.Equal(t, "unavailable", a.errorCode())
}
