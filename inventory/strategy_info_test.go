package inventory_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/inventory"
)

// Locks says which built-in strategies take a Redis lock; none of them is a demo row.
func TestBuiltinStrategiesLocks(t *testing.T) {
	locks := map[string]bool{inventory.StrategyLock: true, inventory.StrategyLockGuard: true, inventory.StrategyRedlockGuard: true}
	rows := inventory.StrategyTable()
	assert.Len(t, rows, 6)
	for _, info := range rows {
		assert.Equal(t, locks[info.Name], info.Locks, info.Name)
		assert.False(t, info.Demo, info.Name)
		assert.True(t, inventory.ValidStrategy(info.Name), info.Name)
	}
}

// A Strategy is built by this package: a row made outside it, without a builder, is refused.
func TestExtraStrategyNotBuiltRefused(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	_, err := inventory.NewService(inventory.Config{DB: db,
		Extra: []inventory.Strategy{{StrategyInfo: inventory.StrategyInfo{Name: "mine"}}}})
	assert.Error(t, err)
}
