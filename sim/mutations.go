package sim

import (
	"context"
	"strings"
)

// The mutations: each breaks one rule the sale path keeps, so that a mutation run shows the
// simulator finds its violation (mutations_test.go). They are switches of the simulator's
// database driver, on the SQL a process sends, and one build-tagged switch in inventory
// (-tags simmutation): nothing a production build can turn on.
const (
	// MutationNoFence: the guarded write's fence check removed (AND fence_token < ? always true).
	MutationNoFence = "no-fence"
	// MutationNoStockGuard: the guard's stock >= ? removed from the fenced write (lock+guard
	// then trusts a lock that can be lost).
	MutationNoStockGuard = "no-stock-guard"
	// MutationHoldUncounted: a hold's write does not count the held units (its lines hold 0).
	MutationHoldUncounted = "hold-uncounted"
	// MutationCartSplit: a write's stock updates go in two transactions (the first line's
	// update commits alone).
	MutationCartSplit = "cart-split"
	// MutationReuseTriedToken: a streaming hold writes again under a token whose transaction
	// ran (inventory's MutateReuseTriedToken, -tags simmutation).
	MutationReuseTriedToken = "reuse-tried-token"
)

// mutateSQL is query under mutation m.
func mutateSQL(m, query string) string {
	switch m {
	case MutationNoFence:
		return strings.Replace(query, "AND fence_token < ?", "AND (fence_token < ? OR 1 = 1)", 1)
	case MutationNoStockGuard:
		if strings.Contains(query, "AND fence_token < ?") {
			return strings.Replace(query, "AND stock >= ?", "AND (stock >= ? OR 1 = 1)", 1)
		}
	case MutationHoldUncounted:
		if strings.HasPrefix(strings.TrimSpace(query), "INSERT INTO hold_lines") {
			return strings.Replace(query, "VALUES (?, ?, ?, ?)", "VALUES (?, ?, ? * 0, ?)", 1)
		}
	}
	return query
}

// isStockUpdate reports whether query takes units off an item.
func isStockUpdate(query string) bool {
	return strings.HasPrefix(strings.TrimSpace(query), "UPDATE items SET stock = stock - ?")
}

// split is the cart-split mutation: the second stock update of a transaction begins a
// transaction of its own, the first one's update committed.
func (c *conn) split(ctx context.Context, query string) error {
	if c.w.mutation != MutationCartSplit || c.cur == nil || !isStockUpdate(query) {
		return nil
	}
	t := c.cur
	if t.updates++; t.updates != 2 {
		return nil
	}
	if err := t.inner.Commit(); err != nil {
		return err
	}
	tx, err := c.inner.BeginTx(ctx, t.opts)
	if err != nil {
		return err
	}
	t.inner = tx
	return nil
}
