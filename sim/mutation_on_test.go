//go:build simmutation

package sim

import "github.com/stockguard/stockguard/inventory"

// setReuseTriedToken turns inventory's build-tagged mutation on or off.
func setReuseTriedToken(on bool) bool {
	inventory.MutateReuseTriedToken.Store(on)
	return true
}
