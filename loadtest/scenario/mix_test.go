package scenario

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
)

// TestMixConfig: -chaos mix runs 60s with stock that lasts by default; -mix-gap and
// -mix-rounds are checked.
func TestMixConfig(t *testing.T) {
	c, err := ParseConfig([]string{"-chaos", "mix"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, c.Duration)
	assert.Zero(t, c.Requests)
	assert.Equal(t, 1_000_000, c.Stock)
	assert.Equal(t, 2*time.Minute, c.CheckTimeout)
	assert.Equal(t, fault.DefaultMixGap, c.MixGap)
	assert.Zero(t, c.MixRounds)
	c, err = ParseConfig([]string{"-chaos", "mix", "-duration", "20s", "-mix-gap", "300ms", "-mix-rounds", "2", "-stock", "50"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, c.Duration)
	assert.Equal(t, 50, c.Stock)
	assert.Equal(t, 300*time.Millisecond, c.MixGap)
	assert.Equal(t, 2, c.MixRounds)
	_, err = ParseConfig([]string{"-chaos", "mix", "-mix-gap", "5ms"}, io.Discard)
	assert.EqualError(t, err, "-mix-gap must be 10ms..1m, got 5ms")
	_, err = ParseConfig([]string{"-chaos", "mix", "-mix-rounds", "-1"}, io.Discard)
	assert.EqualError(t, err, "-mix-rounds must be 0..100, got -1")
	_, err = ParseConfig([]string{"-chaos", "pause", "-mix-rounds", "1"}, io.Discard)
	assert.EqualError(t, err, "-mix-rounds applies to -chaos mix")
	_, err = ParseConfig([]string{"-chaos", "mix", "-hang-for", "1s"}, io.Discard)
	assert.NoError(t, err, "-hang-for is only checked for the hang modes")
}

// TestChaosMixSchedule is the short schedule: -chaos mix with a half-second lease, faults
// 0.2-0.4s apart, each run held until one full round fired (-mix-rounds 1, so that a slow
// machine takes longer instead of missing a kind). lock+guard and naive on SQLite (seven
// kinds), guard on a private PostgreSQL (eight: its crash restart too). Every kind fires and
// is on the timeline and the HTML report's strip; lock+guard and guard stay SAFE with a
// linearizable history; naive is caught.
func TestChaosMixSchedule(t *testing.T) {
	testkit.NeedStorefront(t)
	testkit.NeedClock(t)
	dir := t.TempDir()
	run := func(t *testing.T, db string, strategies ...string) *report.Report {
		cfg := smallRun(strategies...)
		cfg.Chaos, cfg.DB, cfg.Lease, cfg.MixGap, cfg.MixRounds = fault.ChaosMix, db, 500*time.Millisecond, 200*time.Millisecond, 1
		cfg.Requests, cfg.Duration, cfg.Stock, cfg.Reads, cfg.CheckTimeout = 0, 2*time.Second, 1_000_000, 0.1, checks.DefaultCheckTimeout
		cfg.HTMLFile = filepath.Join(dir, db+".html")
		require.NoError(t, validate(&cfg))
		rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
		require.NoError(t, err)
		require.NoError(t, rep.WriteHTML(cfg.HTMLFile))
		page, err := os.ReadFile(cfg.HTMLFile)
		require.NoError(t, err)
		assert.Contains(t, string(page), `aria-label="fault schedule"`)
		var out bytes.Buffer
		rep.WriteTable(&out)
		t.Log(out.String())
		for _, s := range rep.Strategies {
			ev := s.Chaos
			require.NotNil(t, ev, s.Strategy)
			require.NotNil(t, ev.Mix, "%s: %s", s.Strategy, ev)
			assert.True(t, ev.Mix.Complete(), "%s: every kind fired: %s", s.Strategy, ev)
			assert.GreaterOrEqual(t, ev.Mix.Rounds, 1)
			kinds := fault.MixKinds()
			if db != cluster.DBPostgres {
				kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == "postgres-restart" })
			}
			for _, kind := range kinds {
				assert.Positive(t, ev.Mix.Fired[kind], "%s: %s fired", s.Strategy, kind)
				assert.True(t, slices.ContainsFunc(ev.Timeline, func(m fault.Milestone) bool { return strings.HasPrefix(m.What, kind+": ") }),
					"%s: %s on the timeline", s.Strategy, kind)
			}
			assert.Contains(t, ev.Timeline[len(ev.Timeline)-1].What, "every kind fired")
			require.NotNil(t, s.History)
			if s.Strategy == "naive" {
				assert.True(t, s.Verdict != verdict.Safe || s.History.Verdict == checks.NotLinearizable, "naive is caught: %s, %s", s.Verdict, s.History.Verdict)
				continue
			}
			assert.Equal(t, verdict.Safe, s.Verdict, "%s: %v", s.Strategy, s.Violations)
			assert.Equal(t, checks.Linearizable, s.History.Verdict, "%s: %s", s.Strategy, s.History.Reason)
			assert.False(t, s.Failed)
		}
		assert.Equal(t, 0, rep.ExitCode, rep.Failed)
		return rep
	}
	t.Run("sqlite", func(t *testing.T) { run(t, cluster.DBSQLite, "lock+guard", "naive") })
	t.Run("postgres", func(t *testing.T) { run(t, cluster.DBPostgres, "guard") })
	assert.Empty(t, testkit.Children(t))
}
