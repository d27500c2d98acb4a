package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
)

func needClock(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"redis-server", "cc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("-chaos clock needs %s on PATH", bin)
		}
	}
}

// TestClockStepExpiresKeysEarly starts a redis-server with the clock shim and steps its clock:
// a key's PTTL drops by the step at once, and a step past its TTL expires it.
func TestClockStepExpiresKeysEarly(t *testing.T) {
	needClock(t)
	ctx := context.Background()
	dir := t.TempDir()
	clock, env, err := prepareClock(ctx, dir)
	require.NoError(t, err)
	srv, err := startRedis("", env...)
	require.NoError(t, err)
	defer srv.Close()
	rdb := srv.Client()
	defer rdb.Close()

	require.NoError(t, rdb.Set(ctx, "lease", "me", 10*time.Second).Err())
	before, err := rdb.PTTL(ctx, "lease").Result()
	require.NoError(t, err)
	assert.Greater(t, before, 9*time.Second)

	offset, err := clock.Jump(4 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 4*time.Second, offset)
	after, err := rdb.PTTL(ctx, "lease").Result()
	require.NoError(t, err)
	assert.Less(t, after, 6100*time.Millisecond, "4s of the TTL gone at once")
	assert.Greater(t, after, 4*time.Second)

	offset, err = clock.Jump(7 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 11*time.Second, offset)
	n, err := rdb.Exists(ctx, "lease").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a step past the TTL expires the key")
	assert.Equal(t, time.Duration(-2), mustPTTL(t, rdb, "lease"), "PTTL -2: no such key")
}

func mustPTTL(t *testing.T, rdb *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	return d
}

// TestChaosClock runs -chaos clock on lock+guard: the holder's key expires at once when Redis's
// clock steps, another instance takes the lock, and lock+guard stays SAFE with a linearizable
// history (the fence refuses the stale holder).
func TestChaosClock(t *testing.T) {
	needStorefront(t)
	needClock(t)
	ctx := context.Background()
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.Lease, cfg.Work = ChaosClock, 500*time.Millisecond, 100*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Stock, cfg.Reads, cfg.CheckTimeout = 0, 3*time.Second, 1000, 0.1, DefaultCheckTimeout
	require.NoError(t, cfg.validate())
	cl, err := Start(ctx, ClusterConfig{Bin: storefrontBin, Instances: 3, Lease: cfg.Lease, Redis: TopologyClock})
	require.NoError(t, err)
	defer cl.Close()
	require.NotNil(t, cl.Clock)
	rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, tlog{t})
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
	assert.Equal(t, Linearizable, s.History.Verdict, s.History.Reason)
	assert.Equal(t, 0, rep.ExitCode)
}
