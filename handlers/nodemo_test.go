//go:build nodemo

package handlers_test

import (
	"testing"

	"github.com/stockguard/stockguard/inventory"
)

// demoRows: the nodemo build has no demo strategies.
func demoRows(testing.TB, envOptions) []inventory.Strategy { return nil }
