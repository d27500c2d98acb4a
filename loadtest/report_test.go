package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
)

func fakeConfig(strategies ...string) Config {
	return Config{Strategies: strategies, Items: 2, Stock: 20, Requests: 200, Concurrency: 16, Quantity: 1,
		Hot: 1, Retry: 0.1, Work: 5 * time.Millisecond, Timeout: 5 * time.Second, Seed: 42, Quiet: true}
}

func TestFakeNaiveOversellsGuardSafe(t *testing.T) {
	_, srv := newFake(t, true)
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
	assert.Len(t, guard.Distribution, len(distributionPercentiles))
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
	_, srv := newFake(t, true)
	rep, err := RunTargets(context.Background(), fakeConfig("guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, rep.WriteJSON(filepath.Join(dir, "r.json")))
	require.NoError(t, rep.WriteHTML(filepath.Join(dir, "r.html")))

	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	require.NoError(t, err)
	var back Report
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
	f, srv := newFake(t, true)
	f.wrongStr = "naive"
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
	f, srv := newFake(t, true)
	f.ghost = true
	rep, err := RunTargets(context.Background(), fakeConfig("lock+guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Positive(t, g.OrdersWithout201)
	assert.Equal(t, verdict.OrderMismatch, g.Verdict)
	assert.Equal(t, 1, rep.ExitCode)
}

func TestFakeNotDemoRunsServerStrategy(t *testing.T) {
	_, srv := newFake(t, false)
	rep, err := RunTargets(context.Background(), fakeConfig("naive", "guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	require.Len(t, rep.Strategies, 1)
	assert.False(t, rep.Demo)
	assert.Equal(t, "lock+guard", rep.Strategies[0].Strategy)
	assert.Equal(t, verdict.Safe, rep.Strategies[0].Verdict, rep.Strategies[0].Violations)
	assert.Empty(t, rep.Strategies[0].ErrorsByCode, "no X-Strategy/X-Simulated-Work sent to a non-demo server")
}

func TestFakeOpenModel(t *testing.T) {
	_, srv := newFake(t, true)
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
	_, srv := newFake(t, true)
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

func TestSettled(t *testing.T) {
	timeout := PurchaseResult{Code: "timeout"}
	busy := PurchaseResult{Status: 503, Code: "lock_timeout"}
	ok := PurchaseResult{Status: 201}
	for _, c := range []struct {
		attempts, replays []PurchaseResult
		want              bool
	}{
		{[]PurchaseResult{ok}, nil, true},
		{[]PurchaseResult{busy}, nil, true},
		{[]PurchaseResult{timeout}, nil, false},
		{[]PurchaseResult{busy, timeout}, nil, false}, // the copy may have sold
		{[]PurchaseResult{timeout, ok}, nil, true},
		{[]PurchaseResult{timeout}, []PurchaseResult{timeout}, false},
		{[]PurchaseResult{timeout}, []PurchaseResult{timeout, busy}, true},
	} {
		p := &Purchase{Attempts: c.attempts, Replays: c.replays}
		assert.Equal(t, c.want, p.Settled(), "%+v / %+v", c.attempts, c.replays)
	}
}

// TestCheckWastedWorkAndTokens: check hands internal/verdict the load test's own record (the
// work of refused attempts is wasted, the work of sold ones is not) and the order rows (one
// fence token written by two transactions, batch ids, is an order mismatch).
func TestCheckWastedWorkAndTokens(t *testing.T) {
	key := func(s string) *string { return &s }
	ps := []*Purchase{
		{Key: "a", ItemID: 1, Quantity: 1, Attempts: []PurchaseResult{
			{Status: 201, WorkMS: 20, Receipt: Receipt{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard"}},
			{Status: 200, WorkMS: 0, Receipt: Receipt{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard"}}}},
		{Key: "b", ItemID: 1, Quantity: 1, Attempts: []PurchaseResult{
			{Status: 201, WorkMS: 20, Receipt: Receipt{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "lock+guard"}}}},
		{Key: "c", ItemID: 1, Quantity: 1, Attempts: []PurchaseResult{{Status: 409, Code: "sold_out", WorkMS: 20}}},
		{Key: "d", ItemID: 1, Quantity: 1, Attempts: []PurchaseResult{{Status: 409, Code: "sold_out"}}},
		{Key: "e", ItemID: 1, Quantity: 1, Attempts: []PurchaseResult{{Status: 503, Code: "lock_lost", WorkMS: 7.5}}},
	}
	stats := []ItemStats{{ItemID: 1, InitialStock: 2, Stock: 0, SoldUnits: 2, OrderCount: 2}}
	oneBatch := []Order{
		{OrderID: 1, ItemID: 1, Quantity: 1, Strategy: "lock+guard", FenceToken: 9, BatchID: 77, IdempotencyKey: key("a")},
		{OrderID: 2, ItemID: 1, Quantity: 1, Strategy: "lock+guard", FenceToken: 9, BatchID: 77, IdempotencyKey: key("b")},
	}
	f := Check("lock+guard", ps, stats, oneBatch)
	assert.Equal(t, verdict.Safe, f.Verdict(), f.Violations)
	assert.InDelta(t, 67.5, f.WorkSpentMS, 1e-9)
	assert.InDelta(t, 27.5, f.WastedWorkMS, 1e-9)
	assert.Equal(t, 0, f.TokenRewrites)
	assert.Equal(t, 1, f.WriteTxs)
	assert.InDelta(t, 2.0, f.MeanBatch, 1e-9, "two orders in one write transaction")

	twoBatches := append([]Order(nil), oneBatch...)
	twoBatches[1].BatchID = 78
	f = Check("lock+guard", ps, stats, twoBatches)
	assert.Equal(t, 1, f.TokenRewrites)
	assert.Equal(t, 2, f.WriteTxs)
	assert.Equal(t, verdict.OrderMismatch, f.Verdict())
	assert.Contains(t, strings.Join(f.Violations, "\n"), "fence token 9 written by two transactions")
}

func TestTimingMS(t *testing.T) {
	h := "work;dur=20.500, lock;dur=3"
	assert.InDelta(t, 20.5, timingMS(h, "work"), 1e-9)
	assert.InDelta(t, 3.0, timingMS(h, "lock"), 1e-9)
	assert.Zero(t, timingMS(h, "db"))
	assert.Zero(t, timingMS("", "work"))
	assert.Zero(t, timingMS("work", "work"), "no dur")
	assert.InDelta(t, 1.25, timingMS(`cache;desc="hit", work;desc="x";dur=1.25`, "work"), 1e-9)
}

// TestExpectedSafe: what a run expects of a strategy follows from what the server says of it
// (safe, takes_lock, demo_only, redis_key_prefix) and the chaos mode's table.
func TestExpectedSafe(t *testing.T) {
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
	expect := func(strategy, chaos string) bool {
		m, ok := ModeOf(chaos)
		require.True(t, ok, chaos)
		return m.ExpectSafe(ClassOf(described[strategy]))
	}
	assert.False(t, expect("naive", ""))
	assert.False(t, expect("local", ""), "nothing holds across processes")
	assert.True(t, expect("lock", ""))
	assert.False(t, expect("lock", "pause"))
	assert.False(t, expect("lock", "failover"))
	assert.True(t, expect("lock", "partition"), "its watchdog declares the loss in time")
	assert.True(t, expect("lock", "latency"))
	assert.True(t, expect("guard", "pause"))
	assert.True(t, expect("lock+guard", "pause"))
	assert.True(t, expect("lock+guard", "failover"))
	assert.False(t, expect("fixed-lease", "pause"))
	assert.True(t, expect("fixed-lease", ""))
	assert.True(t, expect("redis-stock", ""))
	assert.True(t, expect("redis-stock+guard", "pause"))
	assert.True(t, expect("optimistic", "pause"))
	assert.False(t, expect("fixed-lease", "partition"), "no watchdog to declare the loss")
	assert.False(t, expect("redis-stock", "failover"), "a failover may lose the mirror's latest writes")
	assert.True(t, expect("redis-stock", "partition"))
	assert.True(t, expect("redis-stock+guard", "failover"))
	assert.Equal(t, ClassUnprotected, ClassOf(described["naive"]))
	assert.Equal(t, ClassMirror, ClassOf(described["redis-stock"]))
	assert.Equal(t, ClassDemoLock, ClassOf(described["fixed-lease"]))

	offered := make([]storeapi.Strategy, 0, len(described))
	for _, name := range []string{"naive", "local", "lock", "guard", "lock+guard", "fixed-lease", "optimistic"} {
		offered = append(offered, described[name])
	}
	assert.Equal(t, []string{"naive", "local", "lock", "guard", "lock+guard"}, noChaos.DefaultStrategies(offered),
		"every strategy offered outside demo mode")
	failover, _ := ModeOf(ChaosFailover)
	assert.Equal(t, []string{"lock", "lock+guard"}, failover.DefaultStrategies(offered), "those that take a lock")
	pause, _ := ModeOf(ChaosPause)
	assert.Equal(t, noChaos.DefaultStrategies(offered), pause.DefaultStrategies(offered), "a pause hits any serving instance")

	picked, err := pickStrategies(Config{Strategies: []string{"guard", "fixed-lease"}}, noChaos, offered)
	require.NoError(t, err)
	assert.Equal(t, []string{"guard", "fixed-lease"}, picked)
	_, err = pickStrategies(Config{Strategies: []string{"fast"}}, noChaos, offered)
	var ue *usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), `unknown strategy "fast" (the servers offer: naive, local, lock`)
}

// TestChaosHelp: the -chaos help and its error message come from the table of modes.
func TestChaosHelp(t *testing.T) {
	for _, m := range chaosModes {
		assert.Contains(t, Help(), fmt.Sprintf("%q %s", m.Name, m.Help))
		assert.NotEmpty(t, m.Safe, m.Name)
		assert.True(t, (m.inject == nil) != (m.Second == nil), "%s: a fault during the run or a second run under it", m.Name)
	}
	_, err := ParseConfig([]string{"-chaos", "kill"}, io.Discard)
	assert.EqualError(t, err, `-chaos must be one of pause, failover, partition, latency, clock, mix, redis-hang, db-hang or none, got "kill"`)
	c, err := ParseConfig([]string{"-chaos", "none"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, ChaosNone, c.Chaos)
	c, err = ParseConfig([]string{"-chaos", "partition"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 400*time.Millisecond, c.Lease, "partition: a short lease")
	assert.Equal(t, 800*time.Millisecond, c.Work, "partition: a work twice the lease")
}

func TestParseConfig(t *testing.T) {
	var sink bytes.Buffer
	c, err := ParseConfig(nil, &sink)
	require.NoError(t, err)
	assert.Equal(t, 3, c.Instances)
	assert.Nil(t, c.Strategies, "the chaos mode's default among the strategies the servers offer")
	assert.Equal(t, []string{RouteRoundRobin}, c.Routes, "safety must not rest on routing: round-robin by default")

	c, err = ParseConfig([]string{"-route", "item"}, &sink)
	require.NoError(t, err)
	assert.Equal(t, []string{RouteItem}, c.Routes)
	c, err = ParseConfig([]string{"-route", "item, round-robin"}, &sink)
	require.NoError(t, err)
	assert.Equal(t, []string{RouteItem, RouteRoundRobin}, c.Routes)

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

	assert.Equal(t, DBSQLite, c.DB)
	for _, db := range []string{"postgres", "sqlite", "postgres://u:p@127.0.0.1:5432/shop", "postgresql://u@localhost/shop?sslmode=disable"} {
		c, err = ParseConfig([]string{"-db", db}, &sink)
		require.NoError(t, err, db)
		assert.Equal(t, db, c.DB)
	}

	for _, args := range [][]string{
		{"-db", "mysql"}, {"-db", "/tmp/x.db"}, {"-db", "postgres://"},
		{"-target", "http://127.0.0.1:1", "-admin-token", "x", "-db", "postgres"},
		{"-items", "0"}, {"-hot", "1.5"}, {"-work", "2s"}, {"-strategies", ","}, {"-chaos", "kill"},
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

func TestMainExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 2, Main(context.Background(), []string{"-quantity", "0"}, &out, &errb))
	assert.Equal(t, "loadtest: -quantity must be 1..1000, got 0\n", errb.String())

	errb.Reset()
	assert.Equal(t, 2, Main(context.Background(), []string{"-target", "http://127.0.0.1:1", "-admin-token", "x"}, &out, &errb))
	assert.Contains(t, errb.String(), "unreachable")
	assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "one line")

	_, srv := newFake(t, true)
	dir := t.TempDir()
	errb.Reset()
	code := Main(context.Background(), []string{"-target", srv.URL, "-admin-token", "t0k", "-strategies", "naive,guard",
		"-requests", "100", "-items", "1", "-stock", "10", "-work", "2ms", "-json", filepath.Join(dir, "r.json"),
		"-html", filepath.Join(dir, "r.html")}, &out, &errb)
	assert.Equal(t, 0, code, errb.String())
	assert.FileExists(t, filepath.Join(dir, "r.json"))

	errb.Reset()
	code = Main(context.Background(), []string{"-target", srv.URL, "-admin-token", "t0k", "-strategies", "guard,fast", "-requests", "10"}, &out, &errb)
	assert.Equal(t, 2, code, "a strategy the servers do not offer is a usage error")
	assert.Contains(t, errb.String(), `unknown strategy "fast" (the servers offer: naive, local, lock, guard, lock+guard)`)
	assert.FileExists(t, filepath.Join(dir, "r.html"))
	assert.Contains(t, out.String(), "guard")
}

func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	deadline := time.Now().Add(30 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ { // spend some CPU
		_ = strings.Repeat("x", n%100)
	}
	cpu, ok := procCPU(os.Getpid())
	require.True(t, ok)
	assert.Positive(t, cpu)
	_, ok = procCPU(-1)
	assert.False(t, ok)
}
