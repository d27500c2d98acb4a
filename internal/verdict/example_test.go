package verdict_test

import (
	"fmt"

	"github.com/stockguard/stockguard/internal/verdict"
)

// A burst of buyers on one item is judged by the item's numbers before and after it, and by
// the buyers' answers when a lock may have been left behind.
func ExampleBetween() {
	before := verdict.Item{ItemID: 1, InitialStock: 5, Stock: 1, SoldUnits: 4, OrderCount: 4}
	after := verdict.Item{ItemID: 1, InitialStock: 5, Stock: 0, SoldUnits: 7, OrderCount: 7}
	c := verdict.Between(before, after)
	fmt.Println(c.Sold, c.Oversold, c.LostUpdates, c.Verdict())

	// The first buyer died holding a lock without a TTL: every other buyer waited its whole
	// lock wait and was refused, nothing was sold.
	answers := map[string]int{"unavailable": 1, "lock_timeout": 5}
	stuck := verdict.Between(after, after)
	stuck.Blocked = verdict.AllRefused(answers, "lock_timeout", 6-1)
	fmt.Println(stuck.Verdict())
	// Output:
	// 3 2 2 OVERSOLD
	// BLOCKED
}
