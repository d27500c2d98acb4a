package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
)

func fakeConfig(strategies ...string) config.Config {
	return config.Config{Strategies: strategies, Items: 2, Stock: 20, Requests: 200, Concurrency: 16, Quantity: 1,
		Hot: 1, Retry: 0.1, Work: 5 * time.Millisecond, Timeout: 5 * time.Second, Seed: 42, Quiet: true}
}

func TestFakeNaiveOversellsGuardSafe(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	rep, err := RunTargets(context.Background(), fakeConfig("naive", "guard"), []string{srv.URL, srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	require.Len(t, rep.Strategies, 2)
	naive, guard := rep.Strategies[0], rep.Strategies[1]
	assert.Equal(t, verdict.Oversold, naive.Verdict)
	assert.Positive(t, naive.OversoldUnits)
	assert.Positive(t, naive.LostUpdates)
	assert.False(t, naive.Failed, "naive is expected to oversell")
	assert.Equal(t, verdict.Safe, guard.Verdict, guard.Violations)
	assert.Equal(t, 20, guard.SoldUnits)
	assert.Equal(t, 200, guard.Requests)
	assert.Greater(t, guard.Sends, 200, "the -retry share is sent twice")
	assert.Positive(t, guard.Replayed, "retries of a 201 are answered 200")
	assert.Equal(t, 0, rep.ExitCode)
	assert.Positive(t, guard.Latency.P50)
	assert.Len(t, guard.Distribution, 18, "a point per percentile of the chart (report.distributionPercentiles)")
	assert.Positive(t, guard.WorkSpentMS, "the work is read from Server-Timing")
	assert.LessOrEqual(t, guard.WastedWorkMS, guard.WorkSpentMS)

	var buf bytes.Buffer
	rep.WriteTable(&buf)
	assert.Contains(t, buf.String(), "OVERSOLD (expected)")
	assert.Contains(t, buf.String(), "wasted work")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 5)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(lines[3]), "naive"), lines[3])
}

func TestFakeReportFilesRoundTrip(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	rep, err := RunTargets(context.Background(), fakeConfig("guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, rep.WriteJSON(filepath.Join(dir, "r.json")))
	require.NoError(t, rep.WriteHTML(filepath.Join(dir, "r.html")))

	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	require.NoError(t, err)
	var back report.Report
	require.NoError(t, json.Unmarshal(b, &back))
	require.Len(t, back.Strategies, 1)
	assert.Equal(t, rep.Strategies[0].SoldUnits, back.Strategies[0].SoldUnits)
	assert.Equal(t, rep.Strategies[0].Items, back.Strategies[0].Items)
	assert.Equal(t, "SAFE", back.Strategies[0].Verdict)

	h, err := os.ReadFile(filepath.Join(dir, "r.html"))
	require.NoError(t, err)
	page := string(h)
	assert.Contains(t, page, "Chart.js v4", "the chart library is inlined")
	assert.Contains(t, page, `"strategy":"guard"`)
	assert.Contains(t, page, "<th>wasted work</th>")
	assert.NotContains(t, page, "<script src", "no external script: the page works offline")
	assert.NotContains(t, page, "sourceMappingURL")
}

func TestFakeWrongStrategyFails(t *testing.T) {
	f, srv := testkit.NewFake(t, true)
	f.WrongStr = "naive"
	rep, err := RunTargets(context.Background(), fakeConfig("guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Equal(t, verdict.OrderMismatch, g.Verdict)
	assert.Positive(t, g.WrongStrategy)
	assert.True(t, g.Failed)
	assert.Equal(t, 1, rep.ExitCode)
	assert.Equal(t, []string{"guard"}, rep.Failed)

	path := filepath.Join(t.TempDir(), "r.html")
	require.NoError(t, rep.WriteHTML(path))
	page, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(page), "guard is called safe but broke an invariant")
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	assert.Contains(t, buf.String(), "ORDER MISMATCH (FAIL: called safe)")
	assert.Contains(t, buf.String(), "names strategy")
}

func TestFakeOrdersWithout201(t *testing.T) {
	f, srv := testkit.NewFake(t, true)
	f.Ghost = true
	rep, err := RunTargets(context.Background(), fakeConfig("lock+guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Positive(t, g.OrdersWithout201)
	assert.Equal(t, verdict.OrderMismatch, g.Verdict)
	assert.Equal(t, 1, rep.ExitCode)
}

func TestFakeNotDemoRunsServerStrategy(t *testing.T) {
	_, srv := testkit.NewFake(t, false)
	rep, err := RunTargets(context.Background(), fakeConfig("naive", "guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	require.Len(t, rep.Strategies, 1)
	assert.False(t, rep.Demo)
	assert.Equal(t, "lock+guard", rep.Strategies[0].Strategy)
	assert.Equal(t, verdict.Safe, rep.Strategies[0].Verdict, rep.Strategies[0].Violations)
	assert.Empty(t, rep.Strategies[0].ErrorsByCode, "no X-Strategy/X-Simulated-Work sent to a non-demo server")
}

func TestFakeOpenModel(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	cfg := fakeConfig("guard")
	cfg.Rate, cfg.Requests = 400, 100
	rep, err := RunTargets(context.Background(), cfg, []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Equal(t, 100, g.Requests+g.Missed)
	assert.GreaterOrEqual(t, g.DurationS, 0.2, "100 arrivals at 400/s take about 250ms")
	assert.Equal(t, verdict.Safe, g.Verdict)
}

func TestFakeTimeoutsAreReconciled(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	cfg := fakeConfig("guard")
	cfg.Requests, cfg.Concurrency, cfg.Retry, cfg.Stock = 30, 5, 0, 100
	cfg.Work, cfg.Timeout = 300*time.Millisecond, 100*time.Millisecond // every first answer is lost
	rep, err := RunTargets(context.Background(), cfg, []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Equal(t, map[string]int{"timeout": 30}, g.ErrorsByCode)
	assert.Equal(t, 30, g.Replays)
	assert.Zero(t, g.Unresolved)
	assert.Equal(t, 30, g.Created+g.Replayed, "each replay finds the original's order (200) or makes it (201)")
	assert.Equal(t, 30, g.SoldUnits)
	assert.Equal(t, verdict.Safe, g.Verdict, g.Violations)
}

func TestParseConfig(t *testing.T) {
	var sink bytes.Buffer
	c, err := ParseConfig(nil, &sink)
	require.NoError(t, err)
	assert.Equal(t, 3, c.Instances)
	assert.Nil(t, c.Strategies, "the chaos mode's default among the strategies the servers offer")
	assert.Equal(t, []string{config.RouteRoundRobin}, c.Routes, "safety must not rest on routing: round-robin by default")

	c, err = ParseConfig([]string{"-route", "item"}, &sink)
	require.NoError(t, err)
	assert.Equal(t, []string{config.RouteItem}, c.Routes)
	c, err = ParseConfig([]string{"-route", "item, round-robin"}, &sink)
	require.NoError(t, err)
	assert.Equal(t, []string{config.RouteItem, config.RouteRoundRobin}, c.Routes)

	c, err = ParseConfig([]string{"-chaos", "pause"}, &sink)
	require.NoError(t, err)
	assert.Zero(t, c.Requests)
	assert.Equal(t, 7*time.Second, c.Duration)
	assert.GreaterOrEqual(t, c.Timeout, 8*time.Second, "requests to a paused instance outlive the pause")

	c, err = ParseConfig([]string{"-perf"}, &sink)
	require.NoError(t, err)
	assert.True(t, c.Perf)
	assert.Equal(t, 64, c.Concurrency, "-perf: 64 closed-loop clients")
	assert.Equal(t, 4*time.Second, c.Duration)
	assert.Zero(t, c.Work, "-perf: no work")
	assert.Equal(t, 3, c.Rounds)

	c, err = ParseConfig([]string{"-duration", "2s"}, &sink)
	require.NoError(t, err)
	assert.Zero(t, c.Requests)

	c, err = ParseConfig([]string{"-target", "http://localhost:8080/, http://[::1]:8081", "-admin-token", "x"}, &sink)
	require.NoError(t, err)
	assert.Equal(t, []string{"http://localhost:8080", "http://[::1]:8081"}, c.Targets)

	assert.Equal(t, cluster.DBSQLite, c.DB)
	for _, db := range []string{"postgres", "sqlite", "postgres://u:p@127.0.0.1:5432/shop", "postgresql://u@localhost/shop?sslmode=disable"} {
		c, err = ParseConfig([]string{"-db", db}, &sink)
		require.NoError(t, err, db)
		assert.Equal(t, db, c.DB)
	}

	for _, args := range [][]string{
		{"-db", "mysql"}, {"-db", "/tmp/x.db"}, {"-db", "postgres://"},
		{"-target", "http://127.0.0.1:1", "-admin-token", "x", "-db", "postgres"},
		{"-items", "0"}, {"-hot", "1.5"}, {"-work", "2s"}, {"-strategies", ","}, {"-chaos", "explode"},
		{"-target", "http://example.com", "-admin-token", "x"}, {"-target", "http://127.0.0.1:1"},
		{"-target", "http://127.0.0.1:1", "-admin-token", "x", "-chaos", "pause"},
		{"-target", "http://127.0.0.1:1", "-admin-token", "x", "-instances", "2"},
		{"-requests", "0"}, {"-nope"}, {"extra"},
		{"-route", "hash"}, {"-route", "item,item"}, {"-perf", "-route", "item"},
		{"-perf", "-strategies", "guard"}, {"-perf", "-work", "1ms"}, {"-perf", "-rounds", "0"}, {"-perf", "-duration", "1ms"},
	} {
		_, err := ParseConfig(args, &sink)
		var ue *usageError
		assert.True(t, errors.As(err, &ue), "%v: %v", args, err)
	}
}

// TestPickStrategies: -strategies names strategies the servers must offer (else a usage
// error); without it, the chaos mode's default (TestExpectedSafe in package fault).
func TestPickStrategies(t *testing.T) {
	described := map[string]storeapi.Strategy{
		"naive":             {Name: "naive"},
		"local":             {Name: "local"},
		"lock":              {Name: "lock", TakesLock: true},
		"guard":             {Name: "guard", Safe: true},
		"lock+guard":        {Name: "lock+guard", Safe: true, TakesLock: true},
		"fixed-lease":       {Name: "fixed-lease", TakesLock: true, DemoOnly: true, RedisKeyPrefix: "p:fixed-lease:"},
		"optimistic":        {Name: "optimistic", Safe: true, DemoOnly: true},
		"redis-stock":       {Name: "redis-stock", DemoOnly: true, RedisKeyPrefix: "p:stock:"},
		"redis-stock+guard": {Name: "redis-stock+guard", Safe: true, DemoOnly: true, RedisKeyPrefix: "p:stock:"},
	}
	offered := make([]storeapi.Strategy, 0, len(described))
	for _, name := range []string{"naive", "local", "lock", "guard", "lock+guard", "fixed-lease", "optimistic"} {
		offered = append(offered, described[name])
	}
	picked, err := pickStrategies(config.Config{Strategies: []string{"guard", "fixed-lease"}}, fault.ModeFor(config.Config{}), offered)
	require.NoError(t, err)
	assert.Equal(t, []string{"guard", "fixed-lease"}, picked)
	_, err = pickStrategies(config.Config{Strategies: []string{"fast"}}, fault.ModeFor(config.Config{}), offered)
	var ue *usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), `unknown strategy "fast" (the servers offer: naive, local, lock`)
}

// TestChaosHelp: the -chaos flag's error message and defaults come from the table of modes
// (the help text: TestChaosHelp in package fault).
func TestChaosHelp(t *testing.T) {
	_, err := ParseConfig([]string{"-chaos", "explode"}, io.Discard)
	assert.EqualError(t, err, `-chaos must be one of pause, failover, partition, latency, clock, mix, kill, redis-hang, db-hang or none, got "explode"`)
	c, err := ParseConfig([]string{"-chaos", "none"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, fault.ChaosNone, c.Chaos)
	c, err = ParseConfig([]string{"-chaos", "partition"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 400*time.Millisecond, c.Lease, "partition: a short lease")
	assert.Equal(t, 800*time.Millisecond, c.Work, "partition: a work twice the lease")
}
