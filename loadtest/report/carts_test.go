package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	assert.Contains(t, out, "carts with the hot item, route round-robin: lock+guard / guard: sold/s 0.50x (15 against 30)")
	assert.Equal(t, 1, strings.Count(out, "carts (-workload"), "one header")
	assert.Contains(t, out, "v3\n")
	assert.NotContains(t, out, "v4")
	assert.Contains(t, out, "... 2 more")
}

// TestCartLockWaitsAndHolds: each cart row tells the longest lock wait of every class with
// answers and the coalesced holds' carts per hold; the route comparison pairs the strategies of
// one route and gives the checkouts' p99 ratio; the HTML report has the carts table.
func TestCartLockWaitsAndHolds(t *testing.T) {
	fig := func(sold, p99, wait float64, holds *workload.HoldFigures) *workload.CartFigures {
		return &workload.CartFigures{Workload: config.WorkloadCart, Checkouts: 100, SoldPerSec: sold, HotCheckouts: 100, HotPerSec: sold,
			HotSoldPerSec: sold, P99MS: p99, Singles: 25, SinglesSoldPerSec: 12, Coalesced: holds,
			LockWaits: []workload.LockWait{{Class: workload.ClassSingle, Answers: 25, MaxMS: wait, MeanMS: wait / 2},
				{Class: workload.ClassHot, Answers: 40, MaxMS: wait + 1, MeanMS: 3}, {Class: workload.ClassHotOther, Answers: 60, MaxMS: wait + 2, MeanMS: 4},
				{Class: workload.ClassCold}}}
	}
	r := &Report{Config: ReportConfig{Routes: []string{config.RouteItem, config.RouteRoundRobin}}, Strategies: []StrategyResult{
		{Strategy: "guard", Route: config.RouteItem, ShowRoute: true, Carts: fig(100, 50, 0, nil)},
		{Strategy: "lock+guard", Route: config.RouteItem, ShowRoute: true, Carts: fig(150, 100, 40, &workload.HoldFigures{Holds: 20, CartHolds: 16, Carts: 160, CartsPerHold: 8, CartsPerCartHold: 10})},
		{Strategy: "guard", Route: config.RouteRoundRobin, ShowRoute: true, Carts: fig(200, 40, 0, nil)},
		{Strategy: "lock+guard", Route: config.RouteRoundRobin, ShowRoute: true, Carts: fig(100, 120, 90, &workload.HoldFigures{Holds: 50, CartHolds: 50, Carts: 100, CartsPerHold: 2, CartsPerCartHold: 2})},
	}}
	for i := range r.Strategies {
		r.Strategies[i].Verdict = verdict.Safe
	}
	var b strings.Builder
	r.writeCarts(&b)
	out := b.String()
	t.Log(out)
	assert.Contains(t, out, "longest lock wait (Server-Timing; mean, answers): single purchases 40ms (20ms, 25); carts of the hot item only 41ms (3.0ms, 40); carts of the hot item and others 42ms (4.0ms, 60)\n")
	assert.NotContains(t, out, "cold items only", "a class without answers is left out")
	assert.Contains(t, out, "single purchases of the hot item among them: 25, 12/s sold")
	assert.Contains(t, out, "coalesced holds: 20, 16 of them served carts; mean carts per hold 8.00 (per hold that served a cart 10.00")
	assert.Equal(t, 2, strings.Count(out, "coalesced holds:"), "guard has none")
	assert.Contains(t, out, "route item: lock+guard / guard: sold/s 1.50x (150 against 100), answered/s 1.50x, p99 2.00x")
	assert.Contains(t, out, "route round-robin: lock+guard / guard: sold/s 0.50x (100 against 200), answered/s 0.50x, p99 3.00x")

	file := filepath.Join(t.TempDir(), "r.html")
	require.NoError(t, r.WriteHTML(file))
	page, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(page), "<th>longest lock wait: carts of the hot item and others</th>")
	assert.Contains(t, string(page), "<td>42ms (4.0ms, 60)</td>")
	assert.Contains(t, string(page), "<td>8.00 (20 holds)</td>")
}
