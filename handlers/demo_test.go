//go:build !nodemo

package handlers_test

import (
	"cmp"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// demoRows returns the demo strategies as the lab plugs them in (inventory.Config.Extra): over
// the broken locks of package pitfalls on opts.redis, or, without Redis, rows that answer
// unavailable.
func demoRows(t testing.TB, opts envOptions) []inventory.Strategy {
	if opts.redis == nil {
		return inventory.DemoStrategies(inventory.DemoDeps{})
	}
	rdb := opts.redis.Client(t)
	po := func(name string) pitfalls.Options {
		return pitfalls.Options{KeyPrefix: inventory.PitfallKeyPrefix(name),
			Lease: cmp.Or(opts.lease, time.Second), Wait: cmp.Or(opts.lockWait, time.Second)}
	}
	return inventory.DemoStrategies(inventory.DemoDeps{
		Pitfalls: map[string]inventory.Locker{
			inventory.StrategySetnxExpire: pitfalls.NewSetnxExpire(rdb, po(inventory.StrategySetnxExpire)),
			inventory.StrategyDelRelease:  pitfalls.NewDelRelease(rdb, po(inventory.StrategyDelRelease)),
			inventory.StrategyFixedLease:  pitfalls.NewFixedLease(rdb, po(inventory.StrategyFixedLease)),
		},
		Mirror: pitfalls.NewMirror(rdb, inventory.StockKeyPrefix),
	})
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
	assert.True(t, demo[inventory.StrategySetnxExpire].TakesLock)
	assert.False(t, demo[inventory.StrategyOptimistic].TakesLock)
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
