package scenario

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hang modes' flags: the defaults fit the run to the hang, db-hang needs -db postgres.
func TestHangModesConfig(t *testing.T) {
	c, err := ParseConfig([]string{"-chaos", "redis-hang"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 8*time.Second, c.HangFor)
	assert.Equal(t, "guard", c.OnRedisDown)
	assert.Equal(t, fault.HangRunLength(8*time.Second), c.Duration)
	assert.Equal(t, 30*time.Second, c.Lease, "the storefront's default lease")
	assert.Zero(t, c.Requests)
	assert.Equal(t, []string{"--on-redis-down", "guard"}, fault.ModeFor(c).Args(c))

	_, err = ParseConfig([]string{"-chaos", "redis-hang", "-on-redis-down", "ignore"}, io.Discard)
	assert.EqualError(t, err, `-on-redis-down must be "guard" or "fail", got "ignore"`)
	_, err = ParseConfig([]string{"-chaos", "db-hang"}, io.Discard)
	var ue *usageError
	require.ErrorAs(t, err, &ue, "exit code 2")
	assert.Contains(t, err.Error(), "-chaos db-hang needs -db postgres")

	c, err = ParseConfig([]string{"-chaos", "db-hang", "-db", "postgres", "-hang-for", "2s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 2*64*3, c.Concurrency, "more buyers than the instances admit")
	assert.GreaterOrEqual(t, c.Timeout, 7*time.Second, "a client timeout that outlives the hang")
	assert.Equal(t, []string{"--max-purchases", "64"}, fault.ModeFor(c).Args(c))
}

// -chaos redis-hang for real, 2s: redis-server is stopped and continued, lock+guard's figures
// are computed from its answers: it sold in the hung window, every such sale degraded, locked
// sales came back, nothing oversold, and the verdict fails the run exactly when a target is
// missed (the ratios depend on the machine's load: reported, not asserted here).
func TestHangRedisRun(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.HangFor, cfg.OnRedisDown, cfg.Lease = fault.ChaosRedisHang, 2*time.Second, "guard", time.Second
	cfg.Items, cfg.Stock, cfg.Hot, cfg.Concurrency = 2, 1_000_000, 0.8, 8
	cfg.Requests, cfg.Duration = 0, fault.HangRunLength(cfg.HangFor)
	require.NoError(t, validate(&cfg))
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	lg := byStrategy(t, rep)["lock+guard"]
	require.NotNil(t, lg.Chaos)
	h := lg.Chaos.Hang
	require.NotNil(t, h, "the hang was brought: %s", lg.Chaos.Note)
	assert.InDelta(t, 2.0, h.ContinuedAt-h.StoppedAt, 0.3)
	assert.Positive(t, h.Healthy.Sent)
	assert.Positive(t, h.Healthy.Sold)
	assert.Positive(t, h.Hung.Sold, "sold while Redis hung")
	// Every sale of the hung window is degraded, or made under a lock taken before the stop
	// (a hold that goes on selling to the buyers who join it: the done-when's "every sale
	// degraded" is judged by the verdict, strictly); none under a lock taken from the stopped
	// Redis.
	assert.Zero(t, h.NewLocks, "no lock taken while Redis was stopped")
	assert.Equal(t, h.Hung.Sold, h.Hung.Degraded+h.HeldOver, "every sale of the hung window degraded or under a lock taken before the stop")
	assert.Zero(t, h.Hung.S5xx)
	assert.GreaterOrEqual(t, h.LockedBackS, 0.0, "locked sales came back")
	assert.Zero(t, h.Oversold)
	assert.True(t, h.Judged)
	assert.Equal(t, len(h.Misses) > 0, lg.Failed, "the verdict fails the run exactly when a target is missed: %v", h.Misses)
	assert.Contains(t, lg.Chaos.String(), "verdict: ")
}

// -chaos db-hang for real, 2s, on a private PostgreSQL: purchases past the bound are answered
// at_capacity while it hangs, no instance admits more than its bound, selling resumes.
func TestHangDBRun(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.HangFor, cfg.DB, cfg.MaxPurchases, cfg.Lease = fault.ChaosDBHang, 2*time.Second, cluster.DBPostgres, 16, time.Second
	cfg.Items, cfg.Stock, cfg.Hot, cfg.Concurrency = 2, 1_000_000, 0.8, 2*16*3
	cfg.Requests, cfg.Duration = 0, fault.HangRunLength(cfg.HangFor)
	require.NoError(t, validate(&cfg))
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	lg := byStrategy(t, rep)["lock+guard"]
	require.NotNil(t, lg.Chaos)
	h := lg.Chaos.Hang
	require.NotNil(t, h, "the hang was brought: %s", lg.Chaos.Note)
	assert.Positive(t, h.Hung.AtCapacity)
	assert.Positive(t, h.MostAdmitted)
	assert.Equal(t, "server", h.AdmittedBy, "read from the instances' access logs")
	assert.LessOrEqual(t, h.MostAdmitted, 16, "the bound on purchases in flight")
	assert.GreaterOrEqual(t, h.ResumedS, 0.0)
	assert.Zero(t, h.Oversold)
	assert.Equal(t, len(h.Misses) > 0, lg.Failed, h.Misses)
}
