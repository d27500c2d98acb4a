//go:build !nodemo

package inventory_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/pitfalls"
)

func init() {
	benchDemo.names = []string{inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyOptimistic}
	benchDemo.retrying = inventory.StrategyOptimistic
	benchDemo.service = func(b *testing.B, db *gorm.DB, srv *redistest.Server) *inventory.Service {
		rdb := warmClient(b, srv)
		lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix})
		b.Cleanup(func() { _ = lc.Close() })
		return newService(b, inventory.Config{DB: db, Locker: inventory.NewLocker(lc),
			Extra: inventory.DemoStrategies(inventory.DemoDeps{Mirror: pitfalls.NewMirror(rdb, inventory.StockKeyPrefix)})})
	}
}
