package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
)

// cartRunConfig is the cart workload of the tests: three items, the first one hot, a stock
// the carts sell out, a 20 ms work so the races are not left to chance.
func cartRunConfig(workload string, strategies ...string) Config {
	cfg := Config{Bin: storefrontBin, Instances: 3, Strategies: strategies, Items: 3, Stock: 30, Requests: 160,
		Concurrency: 12, Quantity: 2, Hot: 0.8, Retry: 0.1, Work: 20 * time.Millisecond, Timeout: 10 * time.Second,
		Seed: 11, Reads: 0.1, CheckTimeout: 20 * time.Second, Workload: workload, HoldTTL: time.Second}
	return cfg
}

// assertCartsSafe checks a safe strategy's run of a cart workload: SAFE, no violation, and
// carts of several items sold or held.
func assertCartsSafe(t *testing.T, s StrategyResult) {
	t.Helper()
	assert.Equal(t, verdict.Safe, s.Verdict, "%s: %v", s.Strategy, s.Violations)
	assert.False(t, s.Failed, s.Strategy)
	assert.Empty(t, s.Violations, s.Strategy)
	require.NotNil(t, s.Carts, s.Strategy)
	assert.Positive(t, s.SoldUnits, s.Strategy)
	assert.Positive(t, s.Samples, "%s: stats sampled during the run", s.Strategy)
	assert.Positive(t, s.Carts.MultiItem, "%s sold (or held) carts of several items", s.Strategy)
}

// TestCartWorkload: carts of 1-4 lines over three items, the hot one in most: naive's
// read-then-write carts break the stock; guard and lock+guard keep every invariant, and the
// history of every checkout, projected on its items, is linearizable.
func TestCartWorkload(t *testing.T) {
	needStorefront(t)
	cfg := cartRunConfig(WorkloadCart, "naive", "guard", "lock+guard")
	require.NoError(t, cfg.validate())
	rep, err := Run(context.Background(), cfg, tlog{t})
	require.NoError(t, err)
	res := byStrategy(t, rep)
	naive := res["naive"]
	assert.Contains(t, []string{verdict.Oversold, verdict.LostUpdate}, naive.Verdict, naive.Violations)
	assert.False(t, naive.Failed, "naive is not called safe")
	for _, s := range []string{"guard", "lock+guard"} {
		assertCartsSafe(t, res[s])
		require.NotNil(t, res[s].History)
		assert.Equal(t, Linearizable, res[s].History.Verdict, "%s: %s", s, res[s].History.Reason)
	}
	assert.Equal(t, 0, rep.ExitCode)
	assert.Empty(t, rep.Failed)
	assertGone(t, reportPIDs(rep)...)
}

// TestHoldWorkload: holds on carts with a 1s ttl, confirmed, cancelled or left to expire;
// once every hold has expired, half of those left are confirmed (each must be refused) and
// every item's remaining units are bought back: an expired hold's units are sellable again.
// naive's direct checkouts overwrite the stock the holds took.
func TestHoldWorkload(t *testing.T) {
	needStorefront(t)
	cfg := cartRunConfig(WorkloadHolds, "naive", "guard", "lock+guard")
	cfg.Stock = 300 // most holds are placed (not short), so that every fate is seen
	require.NoError(t, cfg.validate())
	rep, err := Run(context.Background(), cfg, tlog{t})
	require.NoError(t, err)
	res := byStrategy(t, rep)
	naive := res["naive"]
	assert.NotEqual(t, verdict.Safe, naive.Verdict, "naive's checkouts race the holds")
	assert.False(t, naive.Failed)
	for _, s := range []string{"guard", "lock+guard"} {
		r := res[s]
		assertCartsSafe(t, r)
		c := r.Carts
		t.Logf("%s: %+v", s, *c)
		assert.Positive(t, c.Placed, s)
		assert.Positive(t, c.Confirmed, s)
		assert.Positive(t, c.Cancelled, s)
		assert.Positive(t, c.Expired, s)
		assert.Positive(t, c.LateRefused, "%s: holds confirmed after their expiry are refused", s)
		assert.Positive(t, c.Resold, "%s: the units left once every hold expired are sold", s)
		assert.Zero(t, r.StrandedUnits, s)
		assert.Zero(t, r.ExpiredConfirmed, s)
		require.NotNil(t, r.History)
		assert.Equal(t, Linearizable, r.History.Verdict, "%s: the last item, which no hold touches: %s", s, r.History.Reason)
		assert.Contains(t, r.History.Reason, "left out", s)
	}
	assert.Equal(t, 0, rep.ExitCode)
}

// TestCartChaosPause pauses the instance that holds the hot item's lock (taken with the
// other items of its cart) for 3x the lease: lock+guard's carts stay SAFE, the resumed
// holder's write being refused by the fence of its items (no line is written with an older
// token than one written before it), and guard's too.
func TestCartChaosPause(t *testing.T) {
	needStorefront(t)
	cfg := cartRunConfig(WorkloadCart, "lock+guard", "guard")
	cfg.Chaos, cfg.Lease = ChaosPause, 500*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Stock = 0, 3500*time.Millisecond, 40
	require.NoError(t, cfg.validate())
	rep, err := Run(context.Background(), cfg, tlog{t})
	require.NoError(t, err)
	res := byStrategy(t, rep)
	lg := res["lock+guard"]
	require.NotNil(t, lg.Chaos)
	assert.True(t, lg.Chaos.Paused && lg.Chaos.Confirmed, "the hot lock's holder was paused: %s", lg.Chaos)
	for _, s := range []string{"lock+guard", "guard"} {
		assertCartsSafe(t, res[s])
		assert.Zero(t, res[s].FenceRegressions, s)
	}
	assert.Equal(t, 0, rep.ExitCode)
}

// TestCartWorkloadsOnPostgres runs both cart workloads on a private PostgreSQL server.
func TestCartWorkloadsOnPostgres(t *testing.T) {
	needStorefront(t)
	ctx := context.Background()
	cl, err := Start(ctx, ClusterConfig{Bin: storefrontBin, Instances: 3, DB: DBPostgres})
	require.NoError(t, err)
	defer cl.Close()
	for _, wl := range []string{WorkloadCart, WorkloadHolds} {
		cfg := cartRunConfig(wl, "naive", "guard", "lock+guard")
		cfg.DB = DBPostgres
		require.NoError(t, cfg.validate())
		rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, tlog{t})
		require.NoError(t, err)
		res := byStrategy(t, rep)
		assert.NotEqual(t, verdict.Safe, res["naive"].Verdict, wl)
		for _, s := range []string{"guard", "lock+guard"} {
			assertCartsSafe(t, res[s])
		}
		assert.Equal(t, 0, rep.ExitCode, wl)
	}
}

// TestNextCart: the carts drawn have 1..maxCartLines lines, the hot item first in about -hot
// of them, repeated lines, and every number of distinct items.
func TestNextCart(t *testing.T) {
	w := &Workload{cfg: Config{Hot: 0.8, Quantity: 3}, items: []Item{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}}}
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

// TestCartConfig: the cart workloads refuse what does not apply to them.
func TestCartConfig(t *testing.T) {
	for _, args := range [][]string{
		{"-workload", "basket"},
		{"-workload", "cart", "-strategies", "lock"},
		{"-workload", "cart", "-rate", "100"},
		{"-workload", "cart", "-route", "item"},
		{"-workload", "holds", "-chaos", "failover"},
		{"-workload", "holds", "-hold-ttl", "500ms"},
	} {
		_, err := ParseConfig(args, nil)
		var ue *usageError
		assert.ErrorAs(t, err, &ue, "%v", args)
	}
	c, err := ParseConfig([]string{"-workload", "holds", "-chaos", "pause"}, nil)
	require.NoError(t, err)
	assert.Equal(t, WorkloadHolds, c.Workload)
	assert.Equal(t, time.Second, c.HoldTTL)
	c, err = ParseConfig(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, WorkloadPurchase, c.Workload, "purchase stays the default")
}

// TestWriteCarts: the report shows each strategy's cart figures, the holds' fates, hold then
// confirm against a direct checkout, and lock+guard against guard on the carts with the hot
// item.
func TestWriteCarts(t *testing.T) {
	fig := func(hotSold float64) *CartFigures {
		return &CartFigures{Workload: WorkloadHolds, Checkouts: 100, CheckoutsPerSec: 50, SoldPerSec: 40, HotCheckouts: 80,
			HotPerSec: 40, HotSoldPerSec: hotSold, BySize: []Size{{Items: 1, Sold: 10, MeanMS: 20, P50MS: 18}, {Items: 2, Sold: 8, MeanMS: 24, P50MS: 22}},
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
