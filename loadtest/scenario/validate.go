package scenario

import (
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// validateWorkloads checks -workload (one workload, or a list under -chaos mix) and sets
// c.Workload to the first. A hand-built configuration may give Workload alone.
func validateWorkloads(c *config.Config) error {
	if len(c.Workloads) == 0 {
		if c.Workload == "" {
			c.Workload = config.WorkloadPurchase
		}
		c.Workloads = []string{c.Workload}
	}
	if len(c.Workloads) > 1 && c.Chaos != fault.ChaosMix {
		return usageErr("-workload: a list of workloads (%s) runs under -chaos mix only", strings.Join(c.Workloads, ","))
	}
	for i, w := range c.Workloads {
		switch {
		case w != config.WorkloadPurchase && w != config.WorkloadCart && w != config.WorkloadHolds:
			return usageErr(`-workload must be %q, %q or %q, got %q`, config.WorkloadPurchase, config.WorkloadCart, config.WorkloadHolds, w)
		case slices.Contains(c.Workloads[:i], w):
			return usageErr("-workload %s given twice", w)
		case w == config.WorkloadPurchase:
			continue
		case c.Rate > 0 || c.Perf || c.Scenario != "":
			return usageErr("-workload %s runs the closed model of the strategy comparison (no -rate, -perf or -scenario)", w)
		case c.Chaos == fault.ChaosKill && w != config.WorkloadCart:
			return usageErr("-chaos kill runs -workload purchase or cart (the carts' gaps: checkouts with the hot item), got -workload %s", w)
		case c.Chaos != fault.ChaosNone && c.Chaos != fault.ChaosPause && c.Chaos != fault.ChaosMix && c.Chaos != fault.ChaosKill:
			return usageErr("-workload %s runs with no fault, -chaos pause, -chaos kill or -chaos mix, got -chaos %s", w, c.Chaos)
		case c.CartSingles < 0 || c.CartSingles > 1:
			return usageErr("-cart-singles must be 0..1, got %g", c.CartSingles)
		case w == config.WorkloadHolds && (c.HoldTTL < time.Second || c.HoldTTL > time.Hour):
			return usageErr("-hold-ttl must be 1s..1h, got %s", c.HoldTTL)
		}
		if err := checkCartStrategies(w, c.Strategies); err != nil {
			return err
		}
	}
	c.Workload = c.Workloads[0]
	return nil
}

// validateSoak checks -soak: it samples a -chaos mix run.
func validateSoak(c *config.Config) error {
	switch {
	case !c.Soak:
		return nil
	case c.Chaos != fault.ChaosMix:
		return usageErr("-soak runs under -chaos mix (the fault schedule is what it soaks the storefronts in)")
	case c.SoakEvery < 200*time.Millisecond || c.SoakEvery > time.Minute:
		return usageErr("-soak-every must be 200ms..1m, got %s", c.SoakEvery)
	case c.SoakWarmup < time.Second || c.SoakWarmup > 10*time.Minute:
		return usageErr("-soak-warmup must be 1s..10m, got %s", c.SoakWarmup)
	}
	return nil
}

// checkCartStrategies checks that every strategy of a cart workload sells carts (and, for
// -workload holds, that at least one places holds or guard is offered to place them).
func checkCartStrategies(name string, strategies []string) error {
	for _, s := range strategies {
		if s != "" && !slices.Contains(workload.CartStrategies, s) {
			return usageErr("-workload %s: strategy %q sells no carts (the cart strategies: %s)", name, s, strings.Join(workload.CartStrategies, ", "))
		}
	}
	return nil
}
