package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// demoStrategies returns the demo rows of the strategies table (--demo only), for
// inventory.Config.Extra, over the broken locks of package pitfalls, each under its own key
// prefix, with the storefront's lease as their fixed lease and its lock wait, and the Redis
// stock mirror.
func demoStrategies(cfg config, rdb redis.UniversalClient) []inventory.Strategy {
	opts := func(name string) pitfalls.Options {
		return pitfalls.Options{KeyPrefix: inventory.PitfallKeyPrefix(name), Lease: cfg.lockLease, Wait: cfg.lockWait}
	}
	lockers := map[string]inventory.Locker{
		inventory.StrategySetnxExpire: pitfalls.NewSetnxExpire(rdb, opts(inventory.StrategySetnxExpire)),
		inventory.StrategyDelRelease:  pitfalls.NewDelRelease(rdb, opts(inventory.StrategyDelRelease)),
		inventory.StrategyFixedLease:  pitfalls.NewFixedLease(rdb, opts(inventory.StrategyFixedLease)),
	}
	return inventory.DemoStrategies(inventory.DemoDeps{Pitfalls: lockers, Mirror: pitfalls.NewMirror(rdb, inventory.StockKeyPrefix)})
}
