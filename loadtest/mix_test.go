package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/pgproc"
	"github.com/stockguard/stockguard/internal/verdict"
)

// TestMixOrderIsAPermutation: every round of the schedule fires each kind exactly once, in a
// random order that differs between rounds.
func TestMixOrderIsAPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	orders := map[string]bool{}
	for round := 0; round < 50; round++ {
		order := mixOrder(rng, mixKinds)
		assert.ElementsMatch(t, mixKinds, order, "round %d", round)
		orders[strings.Join(order, ",")] = true
	}
	assert.Greater(t, len(orders), 40, "a new random order per round")
	assert.Equal(t, []string{mixPause, mixKill}, mixKinds[:2], "mixOrder does not reorder its argument")
}

// TestMixKindsOf: the PostgreSQL restart is drawn only when the run uses the private server.
func TestMixKindsOf(t *testing.T) {
	assert.NotContains(t, mixKindsOf(&Cluster{}), mixPostgres)
	assert.Len(t, mixKindsOf(&Cluster{}), len(mixKinds)-1)
	assert.Equal(t, mixKinds, mixKindsOf(&Cluster{Postgres: &pgproc.Server{}}))
}

// TestJudgeMix: a schedule that missed a kind fails the run with a message that says what to
// do; a complete one passes.
func TestJudgeMix(t *testing.T) {
	s := &MixSchedule{Kinds: []string{mixPause, mixClock}, Fired: map[string]int{mixPause: 2}, Missed: []string{mixClock}, Rounds: 0}
	res := &StrategyResult{Chaos: &Event{Mode: ChaosMix, Mix: s}}
	missed := judgeMix(Config{}, res, time.Time{}, nil, false)
	require.Len(t, missed, 1)
	assert.Contains(t, missed[0], "missed clock")
	assert.Contains(t, missed[0], "-duration")
	assert.Contains(t, s.summary(), "pause×2 clock×0; MISSED clock")

	s.Fired[mixClock], s.Missed, s.Rounds = 1, nil, 1
	assert.Empty(t, judgeMix(Config{}, res, time.Time{}, nil, false))
	assert.Contains(t, s.summary(), "in 1 full round(s): pause×2 clock×1; every kind fired")

	assert.NotEmpty(t, judgeMix(Config{}, &StrategyResult{}, time.Time{}, nil, false), "no schedule at all")
}

// TestMixConfig: -chaos mix runs 60s with stock that lasts by default; -mix-gap and
// -mix-rounds are checked.
func TestMixConfig(t *testing.T) {
	c, err := ParseConfig([]string{"-chaos", "mix"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, c.Duration)
	assert.Zero(t, c.Requests)
	assert.Equal(t, 1_000_000, c.Stock)
	assert.Equal(t, 2*time.Minute, c.CheckTimeout)
	assert.Equal(t, DefaultMixGap, c.MixGap)
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

// TestResolveAmbiguous: a purchase answered with a server error around a commit, whose key
// has an order row, is replayed and its order accounted for; one answered sold out or refused
// before any write keeps its order row unaccounted for (ORDER MISMATCH).
func TestResolveAmbiguous(t *testing.T) {
	_, srv := newFake(t, true)
	ctx := context.Background()
	cfg := fakeConfig("guard")
	cfg.Items, cfg.Stock = 1, 10
	a := &API{Base: srv.URL, Token: "t0k", HC: NewHTTPClient(4, 5*time.Second)}
	defer a.HC.CloseIdleConnections()
	items, err := resetCatalogue(ctx, cfg, a)
	require.NoError(t, err)
	w := &Workload{cfg: cfg, apis: []*API{a}, items: items, strategy: "guard"}
	id := items[0].ID
	// The orders exist: the server wrote them, then (as if its database restarted between the
	// commit and its acknowledgement) the client got an error.
	for _, key := range []string{"lost-commit", "sold-out-lie", "refused-lie"} {
		r := a.Purchase(ctx, PurchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: "guard"})
		require.Equal(t, 201, r.Status)
	}
	w.results = []*Purchase{
		{Key: "lost-commit", ItemID: id, Quantity: 1, Attempts: []PurchaseResult{{Status: 503, Code: "unavailable"}}},
		{Key: "sold-out-lie", ItemID: id, Quantity: 1, Attempts: []PurchaseResult{{Status: 409, Code: "sold_out"}}},
		{Key: "refused-lie", ItemID: id, Quantity: 1, Attempts: []PurchaseResult{{Status: 503, Code: "at_capacity"}}},
		{Key: "never-written", ItemID: id, Quantity: 1, Attempts: []PurchaseResult{{Status: 500, Code: "internal"}}},
	}
	orders, err := a.Orders(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, w.ResolveAmbiguous(ctx, orders), "only the ambiguous answer with an order row is replayed")
	require.Len(t, w.results[0].Replays, 1)
	assert.Equal(t, 200, w.results[0].Replays[0].Status, "the replay finds the order")
	assert.Empty(t, w.results[3].Replays, "no order row: nothing to resolve")
	stats, err := a.Stats(ctx)
	require.NoError(t, err)
	f := Check("guard", w.results, stats, orders)
	assert.Equal(t, 2, f.OrdersWithout201, "the lies stay: %v", f.Violations)
	for _, v := range f.Violations {
		assert.NotContains(t, v, "lost-commit")
	}
}

// TestVizPathsDifferPerRun: the two runs of one strategy under -chaos latency (without and
// with the latency) write their visualizations under different names.
func TestVizPathsDifferPerRun(t *testing.T) {
	cfg := Config{HTMLFile: "/tmp/r.html"}
	plain := StrategyResult{Strategy: "lock+guard"}
	slow := StrategyResult{Strategy: "lock+guard", Fault: " +20ms"}
	a, b := VizPath(cfg, plain.Label())(7), VizPath(cfg, slow.Label())(7)
	assert.NotEqual(t, a, b)
	assert.Equal(t, "/tmp/r-history-lock_guard-item-7.html", a)
	assert.Equal(t, "/tmp/r-history-lock_guard__20ms-item-7.html", b)
}

// TestMixStrip: the HTML strip has a row per kind with its count, a bar per fault that began
// (hollow when cut short), the missed kinds marked, every text escaped.
func TestMixStrip(t *testing.T) {
	ev := &Event{Mode: ChaosMix, Mix: &MixSchedule{
		Kinds: []string{mixPause, mixKill, mixClock}, Fired: map[string]int{mixPause: 1, mixKill: 1}, Missed: []string{mixClock},
		Faults: []MixFault{
			{Kind: mixPause, At: 1, End: 2.5, What: "pause: <instance 0>", Outcome: "fired"},
			{Kind: mixKill, At: 3, End: 3.4, What: "kill: instance 1", Outcome: "fired"},
			{Kind: mixPause, At: 9, End: 9.5, What: "pause: instance 2", Outcome: errCutShort.Error()},
		}}}
	svg := string(mixStrip(ev, 10))
	assert.Equal(t, 3, strings.Count(svg, "<rect"))
	assert.Contains(t, svg, "pause ×1")
	assert.Contains(t, svg, "clock ×0 MISSED")
	assert.Contains(t, svg, "&lt;instance 0&gt;")
	assert.NotContains(t, svg, "<instance 0>")
	assert.Contains(t, svg, `fill="none"`, "the fault cut short is hollow")
	assert.Empty(t, mixStrip(&Event{Mode: ChaosPause}, 10))
}

// TestChaosMixSchedule is the short schedule: -chaos mix with a half-second lease, faults
// 0.2-0.4s apart, each run held until one full round fired (-mix-rounds 1, so that a slow
// machine takes longer instead of missing a kind). lock+guard and naive on SQLite (seven
// kinds), guard on a private PostgreSQL (eight: its crash restart too). Every kind fires and
// is on the timeline and the HTML report's strip; lock+guard and guard stay SAFE with a
// linearizable history; naive is caught.
func TestChaosMixSchedule(t *testing.T) {
	needStorefront(t)
	needClock(t)
	dir := t.TempDir()
	run := func(t *testing.T, db string, strategies ...string) *Report {
		cfg := smallRun(strategies...)
		cfg.Chaos, cfg.DB, cfg.Lease, cfg.MixGap, cfg.MixRounds = ChaosMix, db, 500*time.Millisecond, 200*time.Millisecond, 1
		cfg.Requests, cfg.Duration, cfg.Stock, cfg.Reads, cfg.CheckTimeout = 0, 2*time.Second, 1_000_000, 0.1, DefaultCheckTimeout
		cfg.HTMLFile = filepath.Join(dir, db+".html")
		require.NoError(t, cfg.validate())
		rep, err := Run(context.Background(), cfg, tlog{t})
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
			kinds := mixKindsOf(&Cluster{})
			if db == DBPostgres {
				kinds = mixKinds
			}
			for _, kind := range kinds {
				assert.Positive(t, ev.Mix.Fired[kind], "%s: %s fired", s.Strategy, kind)
				assert.True(t, slices.ContainsFunc(ev.Timeline, func(m Milestone) bool { return strings.HasPrefix(m.What, kind+": ") }),
					"%s: %s on the timeline", s.Strategy, kind)
			}
			assert.Contains(t, ev.Timeline[len(ev.Timeline)-1].What, "every kind fired")
			require.NotNil(t, s.History)
			if s.Strategy == "naive" {
				assert.True(t, s.Verdict != verdict.Safe || s.History.Verdict == NotLinearizable, "naive is caught: %s, %s", s.Verdict, s.History.Verdict)
				continue
			}
			assert.Equal(t, verdict.Safe, s.Verdict, "%s: %v", s.Strategy, s.Violations)
			assert.Equal(t, Linearizable, s.History.Verdict, "%s: %s", s.Strategy, s.History.Reason)
			assert.False(t, s.Failed)
		}
		assert.Equal(t, 0, rep.ExitCode, rep.Failed)
		return rep
	}
	t.Run("sqlite", func(t *testing.T) { run(t, DBSQLite, "lock+guard", "naive") })
	t.Run("postgres", func(t *testing.T) { run(t, DBPostgres, "guard") })
	assert.Empty(t, children(t))
}

// TestMissedScheduleReported: a run whose schedule missed a kind is failed as such in the
// table and the HTML report, not as a strategy that broke an invariant.
func TestMissedScheduleReported(t *testing.T) {
	miss := "the fault schedule missed clock: " + mixMissedHint
	rep := &Report{Mode: "self-contained", Config: ReportConfig{Chaos: ChaosMix}, Failed: []string{"guard"}, ExitCode: 1,
		Strategies: []StrategyResult{{Strategy: "guard", Verdict: verdict.Safe, ExpectedSafe: true, Failed: true,
			Findings: verdict.Findings{Violations: []string{miss}}}}}
	var out bytes.Buffer
	rep.WriteTable(&out)
	assert.Contains(t, out.String(), "SAFE (FAIL: see below)")
	assert.Contains(t, out.String(), "guard: "+miss)
	assert.NotContains(t, out.String(), "called safe")
	file := filepath.Join(t.TempDir(), "r.html")
	require.NoError(t, rep.WriteHTML(file))
	page, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(page), "SAFE (failed: see below)")
	assert.Contains(t, string(page), "guard failed:")
	assert.NotContains(t, string(page), "called safe")
}

// TestRestartInstanceSamePort: an instance killed and started again keeps its URL (the same
// port, the same flags), gets a new process, answers, and the old process is gone.
func TestRestartInstanceSamePort(t *testing.T) {
	needStorefront(t)
	ctx := context.Background()
	cl, err := Start(ctx, ClusterConfig{Bin: storefrontBin, Instances: 1})
	require.NoError(t, err)
	defer cl.Close()
	old := cl.Instances[0]
	in, err := cl.RestartInstance(ctx, 0, 100*time.Millisecond)
	require.NoError(t, err)
	assert.Same(t, in, cl.Instances[0])
	assert.Equal(t, old.URL, in.URL, "same port")
	assert.NotEqual(t, old.PID(), in.PID())
	want := slices.Clone(old.args)
	want[slices.Index(want, "--addr")+1] = strings.TrimPrefix(old.URL, "http://")
	assert.Equal(t, want, in.args, "same flags, the address pinned to the port it had")
	select {
	case <-old.done:
	default:
		t.Fatal("the killed process is not reaped")
	}
	a := &API{Base: in.URL, HC: NewHTTPClient(1, time.Second)}
	defer a.HC.CloseIdleConnections()
	require.NoError(t, a.Ready(ctx))
}

// TestRedisRestartEmptyAndFromSnapshot: a restart from the snapshot brings back what the last
// SAVE held and nothing written after it; an empty restart deletes the snapshot first.
func TestRedisRestartEmptyAndFromSnapshot(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("needs redis-server on PATH")
	}
	ctx := context.Background()
	srv, err := startRedis(t.TempDir())
	require.NoError(t, err)
	defer srv.Close()
	rdb := srv.Client()
	defer rdb.Close()
	require.NoError(t, rdb.Set(ctx, "saved", "1", 0).Err())
	require.NoError(t, rdb.Save(ctx).Err())
	require.NoError(t, rdb.Set(ctx, "after", "1", 0).Err())
	pid := srv.PID
	require.NoError(t, srv.RestartFromSnapshot())
	assert.NotEqual(t, pid, srv.PID)
	n, err := rdb.Exists(ctx, "saved", "after").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the snapshot's key only")
	assert.Equal(t, int64(1), mustExists(t, rdb, "saved"))

	require.NoError(t, srv.RestartEmpty())
	assert.Zero(t, mustExists(t, rdb, "saved"))
	assert.NoFileExists(t, filepath.Join(srv.opts.Dir, "dump.rdb"))
	require.NoError(t, srv.RestartFromSnapshot())
	assert.Zero(t, mustExists(t, rdb, "saved"), "no snapshot left to load")
}

func mustExists(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	var n int64
	var err error
	for try := 0; try < 2; try++ { // the first call may meet a connection to the killed server
		if n, err = rdb.Exists(context.Background(), key).Result(); err == nil {
			return n
		}
	}
	require.NoError(t, err)
	return n
}
