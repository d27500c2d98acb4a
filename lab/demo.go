package lab

import (
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// demoStrategies builds what the demo-only strategies sell with: the broken locks of package
// pitfalls, each under its own key prefix, with the storefront's lease as their fixed lease
// and its lock wait, and the Redis stock mirror.
func demoStrategies(cfg StorefrontConfig) (map[string]inventory.Locker, inventory.StockMirror) {
	rdb := cfg.Redis
	opts := func(name string) pitfalls.Options {
		return pitfalls.Options{KeyPrefix: inventory.PitfallKeyPrefix(name), Lease: cfg.Lease, Wait: cfg.LockWait}
	}
	lockers := map[string]inventory.Locker{
		inventory.StrategySetnxExpire: pitfalls.NewSetnxExpire(rdb, opts(inventory.StrategySetnxExpire)),
		inventory.StrategyDelRelease:  pitfalls.NewDelRelease(rdb, opts(inventory.StrategyDelRelease)),
		inventory.StrategyFixedLease:  pitfalls.NewFixedLease(rdb, opts(inventory.StrategyFixedLease)),
	}
	return lockers, pitfalls.NewMirror(rdb, inventory.StockKeyPrefix)
}
