package workload

import (
	"math/rand/v2"
	"testing"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNextCart: the carts drawn have 1..maxCartLines lines, the hot item first in about -hot
// of them, repeated lines, and every number of distinct items.
func TestNextCart(t *testing.T) {
	w := &Workload{cfg: config.Config{Hot: 0.8, Quantity: 3}, items: []client.Item{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}}}
	rng := rand.New(rand.NewPCG(1, 2))
	hot, repeated := 0, 0
	sizes := map[int]int{}
	const n = 2000
	for i := 0; i < n; i++ {
		lines := w.nextCart(rng, w.items)
		require.NotEmpty(t, lines)
		require.LessOrEqual(t, len(lines), MaxCartLines)
		merged := mergeCart(lines)
		if len(merged) < len(lines) {
			repeated++
		}
		sizes[len(merged)]++
		if lines[0].ItemID == 1 {
			hot++
		}
		total := 0
		for _, l := range lines {
			require.True(t, l.Quantity >= 1 && l.Quantity <= 3)
			total += l.Quantity
		}
		for _, l := range merged {
			total -= l.Quantity
		}
		require.Zero(t, total, "merging keeps every unit")
	}
	assert.InDelta(t, 0.8, float64(hot)/n, 0.05)
	assert.Positive(t, repeated)
	for k := 1; k <= MaxCartLines; k++ {
		assert.Positive(t, sizes[k], "carts of %d distinct items", k)
	}
}
