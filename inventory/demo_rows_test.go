//go:build !nodemo

package inventory_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
)

// The demo rows plug in after the built-in ones, marked Demo, Locks set on the pitfall locks
// only; a name offered twice is refused.
func TestDemoStrategiesPlugIn(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	s := newService(t, inventory.Config{DB: db, Extra: inventory.DemoStrategies(inventory.DemoDeps{})})
	locks := map[string]bool{inventory.StrategyLock: true, inventory.StrategyLockGuard: true,
		inventory.StrategySetnxExpire: true, inventory.StrategyDelRelease: true, inventory.StrategyFixedLease: true}
	demo := []string{inventory.StrategySetnxExpire, inventory.StrategyDelRelease, inventory.StrategyFixedLease,
		inventory.StrategyOptimistic, inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyWatch}
	infos := s.DescribeStrategies()
	require.Len(t, infos, 5+len(demo), "no redlock+guard without Config.Redlock")
	for i, info := range infos {
		assert.Equal(t, locks[info.Name], info.Locks, info.Name)
		assert.Equal(t, i >= 5, info.Demo, info.Name)
		assert.Equal(t, info.Demo, inventory.DemoOnly(info.Name), info.Name)
		if i >= 5 {
			assert.Equal(t, demo[i-5], info.Name)
			assert.Equal(t, info.Name != inventory.StrategyOptimistic, info.KeyPrefix != "", "%s: keys of its own in Redis", info.Name)
		}
	}
	assert.False(t, inventory.ValidStrategy(inventory.StrategyWatch), "ValidStrategy knows the built-in rows only")

	// Unavailable without what they sell with, not unknown.
	item := resetItems(t, s, 3)[0]
	for _, name := range []string{inventory.StrategySetnxExpire, inventory.StrategyRedisStock} {
		_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: item, Quantity: 1, Strategy: name})
		assert.ErrorIs(t, err, inventory.ErrUnavailable, name)
	}

	twice := append(inventory.DemoStrategies(inventory.DemoDeps{}), inventory.DemoStrategies(inventory.DemoDeps{})[0])
	_, err := inventory.NewService(inventory.Config{DB: db, Extra: twice})
	assert.Error(t, err)
}
