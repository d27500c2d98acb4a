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
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
)

// TestChaosClock runs -chaos clock on lock+guard: the holder's key expires at once when Redis's
// clock steps, another instance takes the lock, and lock+guard stays SAFE with a linearizable
// history (the fence refuses the stale holder).
func TestChaosClock(t *testing.T) {
	testkit.NeedStorefront(t)
	testkit.NeedClock(t)
	ctx := context.Background()
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.Lease, cfg.Work = fault.ChaosClock, 500*time.Millisecond, 100*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Stock, cfg.Reads, cfg.CheckTimeout = 0, 3*time.Second, 1000, 0.1, checks.DefaultCheckTimeout
	require.NoError(t, validate(&cfg))
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 3, Lease: cfg.Lease, Redis: cluster.TopologyClock})
	require.NoError(t, err)
	defer cl.Close()
	require.NotNil(t, cl.Clock)
	rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
	require.NoError(t, err)
	s := rep.Strategies[0]
	ev := s.Chaos
	require.NotNil(t, ev)
	t.Logf("%s %s: %s", s.Strategy, s.Verdict, ev)
	require.True(t, ev.Confirmed && ev.Token > 0, "a holder was caught: %s", ev)
	require.NotEmpty(t, ev.Timeline)
	assert.Contains(t, ev.Timeline[0].What, "its TTL ended at once", "the step ended the holder's key")
	assert.Equal(t, verdict.Safe, s.Verdict, s.Violations)
	require.NotNil(t, s.History)
	assert.Equal(t, checks.Linearizable, s.History.Verdict, s.History.Reason)
	assert.Equal(t, 0, rep.ExitCode)
}
