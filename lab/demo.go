//go:build !nodemo

package lab

import (
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// demoStrategies returns the demo rows of the strategies table (inventory.Config.Extra) over
// the broken locks of package pitfalls, each under its own key prefix, with PitfallLease of
// the storefront's lease as their fixed lease and its lock wait, each telling events of its
// holds; and the Redis stock mirror.
func demoStrategies(cfg StorefrontConfig, events *Events) []inventory.Strategy {
	rdb := cfg.Redis
	lease := PitfallLease(cfg.Lease)
	opts := func(name string) pitfalls.Options {
		return pitfalls.Options{KeyPrefix: inventory.PitfallKeyPrefix(name), Lease: lease, Wait: cfg.LockWait}
	}
	observed := func(name string, l *pitfalls.Locker) inventory.Locker {
		return newObservedLocker(l, name, lease, events)
	}
	lockers := map[string]inventory.Locker{
		inventory.StrategySetnxExpire: observed(inventory.StrategySetnxExpire, pitfalls.NewSetnxExpire(rdb, opts(inventory.StrategySetnxExpire))),
		inventory.StrategyDelRelease:  observed(inventory.StrategyDelRelease, pitfalls.NewDelRelease(rdb, opts(inventory.StrategyDelRelease))),
		inventory.StrategyFixedLease:  observed(inventory.StrategyFixedLease, pitfalls.NewFixedLease(rdb, opts(inventory.StrategyFixedLease))),
	}
	return inventory.DemoStrategies(inventory.DemoDeps{Pitfalls: lockers, Mirror: pitfalls.NewMirror(rdb, inventory.StockKeyPrefix)})
}

// Strategies describes the demo strategies the lab plugs into a storefront, in order.
func Strategies() []inventory.StrategyInfo {
	rows := inventory.DemoStrategies(inventory.DemoDeps{})
	infos := make([]inventory.StrategyInfo, len(rows))
	for i, st := range rows {
		infos[i] = st.StrategyInfo
	}
	return infos
}
