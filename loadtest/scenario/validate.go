package scenario

import (
	"slices"
	"strings"

	"github.com/stockguard/stockguard/loadtest/workload"
)

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
