package report

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// TestWriteCarts: the report shows each strategy's cart figures, the holds' fates, hold then
// confirm against a direct checkout, and lock+guard against guard on the carts with the hot
// item.
func TestWriteCarts(t *testing.T) {
	fig := func(hotSold float64) *workload.CartFigures {
		return &workload.CartFigures{Workload: config.WorkloadHolds, Checkouts: 100, CheckoutsPerSec: 50, SoldPerSec: 40, HotCheckouts: 80,
			HotPerSec: 40, HotSoldPerSec: hotSold, BySize: []workload.Size{{Items: 1, Sold: 10, MeanMS: 20, P50MS: 18}, {Items: 2, Sold: 8, MeanMS: 24, P50MS: 22}},
			PerExtraItemMS: 4, Holds: 30, Placed: 28, Confirmed: 12, Cancelled: 8, Expired: 8, LateRefused: 4,
			PlaceMeanMS: 10, ConfirmMeanMS: 5, HoldThenMS: 35, CheckoutMeanMS: 25, Resold: 77}
	}
	naive := StrategyResult{Strategy: "naive", Carts: fig(40)}
	naive.Verdict = verdict.Oversold
	naive.Violations = []string{"v1", "v2", "v3", "v4", "v5"}
	r := &Report{Strategies: []StrategyResult{
		naive,
		{Strategy: "guard", Carts: fig(30)},
		{Strategy: "lock+guard", Carts: fig(15)},
	}}
	r.Strategies[1].Verdict, r.Strategies[2].Verdict = verdict.Safe, verdict.Safe
	var b strings.Builder
	r.writeCarts(&b)
	out := b.String()
	t.Log(out)
	assert.Contains(t, out, "carts (-workload holds")
	assert.Contains(t, out, "1: 20ms (p50 18ms, 10), 2: 24ms (p50 22ms, 8); +4.0ms per extra item")
	assert.Contains(t, out, "12 confirmed, 8 cancelled, 8 left to expire (4 confirmed late, refused hold_expired)")
	assert.Contains(t, out, "77 units bought back")
	assert.Contains(t, out, "hold then confirm: 35ms (hold 10ms, the client's work, confirm 5.0ms) against a direct checkout 25ms: 1.40x")
	assert.Contains(t, out, "carts with the hot item: lock+guard / guard: sold/s 0.50x (15 against 30)")
	assert.Equal(t, 1, strings.Count(out, "carts (-workload"), "one header")
	assert.Contains(t, out, "v3\n")
	assert.NotContains(t, out, "v4")
	assert.Contains(t, out, "... 2 more")
}
