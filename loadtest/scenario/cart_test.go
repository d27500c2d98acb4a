package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// cartRunConfig is the cart workload of the tests: three items, the first one hot, a stock
// the carts sell out, a 20 ms work so the races are not left to chance.
func cartRunConfig(workload string, strategies ...string) config.Config {
	cfg := config.Config{Bin: testkit.Storefront, Instances: 3, Strategies: strategies, Items: 3, Stock: 30, Requests: 160,
		Concurrency: 12, Quantity: 2, Hot: 0.8, Retry: 0.1, Work: 20 * time.Millisecond, Timeout: 10 * time.Second,
		Seed: 11, Reads: 0.1, CheckTimeout: 20 * time.Second, Workload: workload, HoldTTL: time.Second}
	return cfg
}

// assertCartsSafe checks a safe strategy's run of a cart workload: SAFE, no violation, and
// carts of several items sold or held.
func assertCartsSafe(t *testing.T, s report.StrategyResult) {
	t.Helper()
	assert.Equal(t, verdict.Safe, s.Verdict, "%s: %v", s.Strategy, s.Violations)
	if h := s.History; h != nil && h.Verdict != checks.Linearizable {
		for _, it := range h.Items {
			if it.Result != "ok" {
				t.Logf("%s: history %s: item %d (%s): %s; visualization %s", s.Strategy, h.Verdict, it.ItemID, it.Result, it.Reason, it.Visualization)
			}
		}
		t.Logf("%s: history %s: %s", s.Strategy, h.Verdict, h.Reason)
	}
	assert.False(t, s.Failed, s.Strategy)
	assert.Empty(t, s.Violations, s.Strategy)
	require.NotNil(t, s.Carts, s.Strategy)
	assert.Positive(t, s.SoldUnits, s.Strategy)
	assert.Positive(t, s.Samples, "%s: stats sampled during the run", s.Strategy)
	assert.Positive(t, s.Carts.MultiItem, "%s sold (or held) carts of several items", s.Strategy)
}

// assertOneHoldPerKey checks a hold run's keys: placements sent twice under their key (-retry),
// no retry held twice, and the servers keep one hold per key answered.
func assertOneHoldPerKey(t *testing.T, s report.StrategyResult) {
	t.Helper()
	assert.Positive(t, s.Carts.Retried, "%s: placements sent twice under their key", s.Strategy)
	assert.Zero(t, s.DoubleHolds, s.Strategy)
	assert.Positive(t, s.HoldKeys, s.Strategy)
	assert.Equal(t, s.HoldKeys, s.ServerHolds, "%s: one hold on the servers per key answered", s.Strategy)
}

// TestCartWorkload: carts of 1-4 lines over three items, the hot one in most: naive's
// read-then-write carts break the stock; guard and lock+guard keep every invariant, and the
// history of every checkout, projected on its items, is linearizable.
func TestCartWorkload(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := cartRunConfig(config.WorkloadCart, "naive", "guard", "lock+guard")
	require.NoError(t, validate(&cfg))
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	res := byStrategy(t, rep)
	naive := res["naive"]
	assert.Contains(t, []string{verdict.Oversold, verdict.LostUpdate}, naive.Verdict, naive.Violations)
	assert.False(t, naive.Failed, "naive is not called safe")
	for _, s := range []string{"guard", "lock+guard"} {
		assertCartsSafe(t, res[s])
		require.NotNil(t, res[s].History)
		assert.Equal(t, checks.Linearizable, res[s].History.Verdict, "%s: %s", s, res[s].History.Reason)
	}
	assert.Equal(t, 0, rep.ExitCode)
	assert.Empty(t, rep.Failed)
	testkit.AssertGone(t, reportPIDs(rep)...)
}

// TestHoldWorkload: holds on carts with a 1s ttl, confirmed, cancelled or left to expire;
// once every hold has expired, half of those left are confirmed (each must be refused) and
// every item's remaining units are bought back: an expired hold's units are sellable again.
// naive's direct checkouts overwrite the stock the holds took.
func TestHoldWorkload(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := cartRunConfig(config.WorkloadHolds, "naive", "guard", "lock+guard")
	cfg.Stock = 300 // most holds are placed (not short), so that every fate is seen
	require.NoError(t, validate(&cfg))
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
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
		assertOneHoldPerKey(t, r)
		require.NotNil(t, r.History)
		assert.Equal(t, checks.Linearizable, r.History.Verdict, "%s: the last item, which no hold touches: %s", s, r.History.Reason)
		assert.Contains(t, r.History.Reason, "left out", s)
	}
	assert.Equal(t, 0, rep.ExitCode)
}

// TestCartChaosPause pauses the instance that holds the hot item's lock (taken with the
// other items of its cart) for 3x the lease: lock+guard's carts stay SAFE, the resumed
// holder's write being refused by the fence of its items (no line is written with an older
// token than one written before it), and guard's too.
func TestCartChaosPause(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := cartRunConfig(config.WorkloadCart, "lock+guard", "guard")
	cfg.Chaos, cfg.Lease = fault.ChaosPause, 500*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Stock = 0, 3500*time.Millisecond, 40
	require.NoError(t, validate(&cfg))
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
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
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 3, DB: cluster.DBPostgres})
	require.NoError(t, err)
	defer cl.Close()
	for _, wl := range []string{config.WorkloadCart, config.WorkloadHolds} {
		cfg := cartRunConfig(wl, "naive", "guard", "lock+guard")
		cfg.DB = cluster.DBPostgres
		require.NoError(t, validate(&cfg))
		rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
		require.NoError(t, err)
		res := byStrategy(t, rep)
		assert.NotEqual(t, verdict.Safe, res["naive"].Verdict, wl)
		for _, s := range []string{"guard", "lock+guard"} {
			assertCartsSafe(t, res[s])
			if wl == config.WorkloadHolds {
				assertOneHoldPerKey(t, res[s])
			}
		}
		assert.Equal(t, 0, rep.ExitCode, wl)
	}
}

// TestCartsRoutedByItem: the cart workload with single purchases of the hot item, routed by
// the carts' key and round-robin: SAFE and linearizable both ways; every class of requests
// reports its lock wait; lock+guard's coalesced holds are read from the instances' /metrics and
// served carts, guard has none.
func TestCartsRoutedByItem(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := cartRunConfig(config.WorkloadCart, "guard", "lock+guard")
	cfg.Routes, cfg.CartSingles, cfg.Hot, cfg.Stock = []string{config.RouteItem, config.RouteRoundRobin}, 0.3, 0.6, 200
	require.NoError(t, validate(&cfg))
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	require.Len(t, rep.Strategies, 4)
	for _, s := range rep.Strategies {
		assertCartsSafe(t, s)
		require.NotNil(t, s.History)
		assert.Equal(t, checks.Linearizable, s.History.Verdict, "%s: %s", s.Label(), s.History.Reason)
		c := s.Carts
		assert.Positive(t, c.Singles, s.Label())
		answered := map[string]int{}
		for _, lw := range c.LockWaits {
			answered[lw.Class] = lw.Answers
			assert.GreaterOrEqual(t, lw.MaxMS, lw.MeanMS, s.Label())
		}
		for _, class := range []string{workload.ClassSingle, workload.ClassHotOther, workload.ClassCold} {
			assert.Positive(t, answered[class], "%s: %s", s.Label(), class)
		}
		if s.Strategy == "guard" {
			require.NotNil(t, c.Coalesced, "the metrics were read")
			assert.Zero(t, c.Coalesced.Holds, "guard takes no lock")
			continue
		}
		require.NotNil(t, c.Coalesced, s.Label())
		assert.Positive(t, c.Coalesced.CartHolds, s.Label())
		assert.GreaterOrEqual(t, c.Coalesced.CartsPerCartHold, 1.0, s.Label())
		var longest float64
		for _, lw := range c.LockWaits {
			longest = max(longest, lw.MaxMS)
		}
		assert.Positive(t, longest, "%s: its buyers waited for the lock", s.Label())
	}
	assert.Equal(t, 0, rep.ExitCode)
}

// TestCartConfig: the cart workloads refuse what does not apply to them.
func TestCartConfig(t *testing.T) {
	for _, args := range [][]string{
		{"-workload", "basket"},
		{"-workload", "cart", "-strategies", "lock"},
		{"-workload", "cart", "-rate", "100"},
		{"-workload", "cart", "-cart-singles", "1.5"},
		{"-workload", "cart", "-cart-singles", "-0.1"},
		{"-workload", "holds", "-chaos", "failover"},
		{"-workload", "holds", "-hold-ttl", "500ms"},
	} {
		_, err := ParseConfig(args, nil)
		var ue *usageError
		assert.ErrorAs(t, err, &ue, "%v", args)
	}
	c, err := ParseConfig([]string{"-workload", "holds", "-chaos", "pause"}, nil)
	require.NoError(t, err)
	assert.Equal(t, config.WorkloadHolds, c.Workload)
	assert.Equal(t, time.Second, c.HoldTTL)
	c, err = ParseConfig(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, config.WorkloadPurchase, c.Workload, "purchase stays the default")
	assert.InDelta(t, 0.2, c.CartSingles, 1e-9, "-workload cart mixes in single purchases by default")
	for _, wl := range []string{config.WorkloadCart, config.WorkloadHolds} {
		c, err = ParseConfig([]string{"-workload", wl, "-route", "item,round-robin"}, nil)
		require.NoError(t, err, "carts are routed by their key (X-Route-Item)")
		assert.Equal(t, []string{config.RouteItem, config.RouteRoundRobin}, c.Routes)
	}
}
