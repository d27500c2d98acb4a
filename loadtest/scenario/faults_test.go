package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
)

// -chaos failover against a real Sentinel set: the promoted replica misses the hot lock and
// its latest token. lock+guard stays SAFE (the stale write is refused by the fence: the
// holder's token writes nothing, or is the twin the strict fence refuses second) and selling
// resumes by itself; lock breaks (a lost update or an oversell), given up to three runs: the
// resumed holder races its watchdog, which may see the loss on the new master first.
func TestChaosFailover(t *testing.T) {
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.Lease = "failover", 500*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Stock, cfg.Items, cfg.Hot = 0, 6*time.Second, 1000, 2, 0.8
	require.NoError(t, validate(&cfg))
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 3, Lease: cfg.Lease, Redis: cluster.TopologySentinel})
	require.NoError(t, err)
	defer cl.Close()

	checkFault := func(s report.StrategyResult) {
		t.Helper()
		require.NotNil(t, s.Chaos, s.Strategy)
		ev := s.Chaos
		t.Logf("%s %s: %s", s.Strategy, s.Verdict, ev)
		require.True(t, ev.Confirmed && ev.Token > 0, "%s: a holder was caught: %s", s.Strategy, ev)
		assert.Positive(t, ev.NewToken, "another instance took the lock on the promoted replica")
		assert.LessOrEqual(t, ev.NewToken, ev.Token, "the promoted replica lost the latest token: the next one is not above it")
		assert.GreaterOrEqual(t, ev.ResumedAfter, 0.0, "selling resumed by itself")
		assert.Positive(t, ev.ResumedAt, "the stale holder was resumed")
	}
	rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
	require.NoError(t, err)
	lg := byStrategy(t, rep)["lock+guard"]
	checkFault(lg)
	assert.Equal(t, verdict.Safe, lg.Verdict, lg.Violations)
	assert.Equal(t, 0, rep.ExitCode)

	cfg.Strategies = []string{"lock"}
	var lock report.StrategyResult
	for run := 1; run <= 3; run++ {
		cfg.Seed++
		rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
		require.NoError(t, err)
		lock = byStrategy(t, rep)["lock"]
		checkFault(lock)
		assert.False(t, lock.Failed, "lock is not called safe under a failover")
		if lock.Verdict != verdict.Safe {
			break
		}
	}
	// The failover broke lock: the stale holder's write lost an update or oversold, or, when
	// the two holders of one token did not race on the stock, the orders show that token
	// written by two transactions (the promoted replica's twin).
	if lock.Verdict == verdict.OrderMismatch {
		assert.Positive(t, lock.TokenRewrites, "an order mismatch under failover is the twin token: %v", lock.Violations)
		return
	}
	assert.Contains(t, []string{verdict.LostUpdate, verdict.Oversold}, lock.Verdict, "the stale holder's write broke lock: %v", lock.Violations)
}

// -chaos partition: the holder's link to Redis is black-holed mid-work (work 2x the lease).
// Its watchdog declares the loss within the lease and before another instance holds the lock,
// its token writes nothing, and both lock strategies stay SAFE.
func TestChaosPartition(t *testing.T) {
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cfg := smallRun("lock", "lock+guard")
	cfg.Chaos, cfg.Lease, cfg.Work = "partition", 400*time.Millisecond, 800*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Items, cfg.Hot = 0, 3*time.Second, 2, 0.8
	require.NoError(t, validate(&cfg))
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 3, Lease: cfg.Lease, Redis: cluster.TopologyProxied})
	require.NoError(t, err)
	defer cl.Close()
	rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
	require.NoError(t, err)
	for _, s := range rep.Strategies {
		ev := s.Chaos
		require.NotNil(t, ev, s.Strategy)
		t.Logf("%s %s: %s", s.Strategy, s.Verdict, ev)
		assert.Equal(t, verdict.Safe, s.Verdict, "%s: %v", s.Strategy, s.Violations)
		require.True(t, ev.Confirmed && ev.Token > 0, "%s: a holder was cut: %s", s.Strategy, ev)
		require.Positive(t, ev.LossAt, "%s: the cut holder declared the loss", s.Strategy)
		assert.Less(t, ev.LossAt-ev.FaultAt, cfg.Lease.Seconds(), "%s: within the lease of the cut", s.Strategy)
		if ev.NextAt > 0 {
			assert.LessOrEqual(t, ev.LossAt, ev.NextAt, "%s: before anyone else held the lock", s.Strategy)
		}
		assert.Equal(t, "nothing", ev.HolderWrote, "%s: the cut holder wrote nothing", s.Strategy)
	}
	assert.Equal(t, 0, rep.ExitCode)
}

// -chaos latency: each strategy runs again with 20ms each way on every link to Redis; both
// runs stay SAFE and the report names the throughput of each.
func TestChaosLatency(t *testing.T) {
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.Latency, cfg.Requests, cfg.Lease = "latency", 20*time.Millisecond, 150, time.Second
	require.NoError(t, validate(&cfg))
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 3, Lease: cfg.Lease, Redis: cluster.TopologyProxied})
	require.NoError(t, err)
	defer cl.Close()
	rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
	require.NoError(t, err)
	require.Len(t, rep.Strategies, 2)
	base, slow := rep.Strategies[0], rep.Strategies[1]
	assert.Equal(t, verdict.Safe, base.Verdict, base.Violations)
	assert.Equal(t, verdict.Safe, slow.Verdict, slow.Violations)
	assert.Equal(t, " +20ms", slow.Fault)
	assert.Equal(t, base.ReqPerSec, slow.Baseline)
	t.Logf("lock+guard: %.0f req/s, with 20ms each way %.0f req/s", base.ReqPerSec, slow.ReqPerSec)
	assert.Equal(t, 0, rep.ExitCode)
}
