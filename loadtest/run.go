package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
)

// errUnreachable marks targets that do not answer (exit code 2).
var errUnreachable = errors.New("unreachable")

// readyWithin bounds the wait for every target's /readyz before a run.
const readyWithin = 10 * time.Second

// Run runs the load test described by cfg: in self-contained mode it starts (and always stops)
// its own cluster, otherwise it uses cfg.Targets. Progress lines go to logw (nil: none).
func Run(ctx context.Context, cfg Config, logw io.Writer) (*Report, error) {
	if len(cfg.Targets) > 0 {
		return RunTargets(ctx, cfg, cfg.Targets, cfg.AdminToken, nil, logw)
	}
	mode := cfg.mode()
	if mode.name == chaosMix {
		// The schedule restarts redis-server: go-redis's lines on the refused dials of the
		// load test's own clients meanwhile are expected, not news.
		redis.SetLogger(quietRedis{})
	}
	ccfg := ClusterConfig{Bin: cfg.Bin, Instances: cfg.Instances, Log: logw, DB: cfg.DB, Redis: mode.redis}
	if mode.name != chaosNone {
		ccfg.Lease = cfg.Lease
	}
	if mode.args != nil {
		ccfg.Args = mode.args(cfg)
	}
	if cfg.StreamHold > 0 {
		ccfg.Args = append(ccfg.Args, "--stream-hold", cfg.StreamHold.String())
	}
	cl, err := StartCluster(ctx, ccfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, logw)
}

// RunTargets runs every strategy of cfg against the storefronts at urls. cl is the cluster that
// runs them when the load test started them itself (needed by -chaos pause), else nil.
func RunTargets(ctx context.Context, cfg Config, urls []string, token string, cl *Cluster, logw io.Writer) (*Report, error) {
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	if len(cfg.Routes) == 0 {
		cfg.Routes = []string{RouteRoundRobin}
	}
	hc := newHTTPClient(cfg.Concurrency, cfg.Timeout)
	defer hc.CloseIdleConnections()
	apis := make([]*api, len(urls))
	for i, u := range urls {
		apis[i] = &api{base: u, token: token, hc: hc}
	}
	rep := &Report{StartedAt: time.Now().UTC(), Mode: "target",
		Machine: Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()},
		Config: ReportConfig{Items: cfg.Items, Stock: cfg.Stock, Requests: cfg.Requests, DurationS: cfg.Duration.Seconds(),
			Concurrency: cfg.Concurrency, Rate: cfg.Rate, Quantity: cfg.Quantity, Hot: cfg.Hot, Retry: cfg.Retry,
			WorkMS: ms(cfg.Work), Chaos: cfg.Chaos, TimeoutMS: ms(cfg.Timeout), Seed: cfg.Seed, Routes: cfg.Routes,
			Spike: cfg.Spike, Reads: cfg.Reads, Workload: cfg.Workload}}
	if cfg.Workload == WorkloadHolds {
		rep.Config.HoldTTLMS = ms(cfg.HoldTTL)
	}
	if cfg.Rate > 0 {
		rep.Config.LatencyFrom = "intended start"
	}
	if cl != nil {
		rep.DB = cl.DB
	}
	switch {
	case cl != nil && cl.Sentinel != nil:
		rep.Mode, rep.Redis, rep.RedisPID = "self-contained", "redis-server under Sentinel (master, replica, 3 sentinels)", cl.Sentinel.Master.PID
	case cl != nil && len(cl.Links) > 0:
		rep.Mode, rep.Redis, rep.RedisPID = "self-contained", cl.Redis.Kind+" behind one proxy per instance", cl.Redis.PID
	case cl != nil:
		rep.Mode, rep.Redis, rep.RedisPID = "self-contained", cl.Redis.Kind, cl.Redis.PID
	}
	mode := cfg.mode()
	if mode.name != chaosNone {
		rep.Config.LeaseMS = ms(cfg.Lease)
	}
	for i, a := range apis {
		info := InstanceInfo{URL: a.base}
		if cl != nil {
			info.PID = cl.Instances[i].PID()
		}
		rep.Instances = append(rep.Instances, info)
		// Ready within a few seconds: a storefront that answers 503 may be waiting for its
		// Redis (a Sentinel set settling after the last run's failover, a breaker's probe).
		pctx, cancel := context.WithTimeout(ctx, readyWithin)
		err := a.ready(pctx)
		for err != nil && pctx.Err() == nil {
			select {
			case <-pctx.Done():
			case <-time.After(100 * time.Millisecond):
				err = a.ready(pctx)
			}
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("target %s %w: %v", a.base, errUnreachable, err)
		}
	}
	demo, err := apis[0].demo(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: GET /api/debug/locks: %w", apis[0].base, err)
	}
	rep.Demo = demo
	if !demo {
		rep.Config.WorkMS = 0 // X-Simulated-Work is refused outside demo mode: none is sent
	}
	offered, err := apis[0].strategies(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", apis[0].base, err)
	}
	strategies, err := pickStrategies(cfg, mode, offered)
	if err != nil {
		return nil, err
	}
	if cfg.cartWorkload() && len(cfg.Strategies) == 0 {
		if strategies = cartOnly(strategies); len(strategies) == 0 {
			return nil, errNoCartStrategy
		}
	}
	if !demo {
		logf(logw, "the targets are not in demo mode: running only their own strategy, without simulated work")
		strategies = []string{""}
	}
	var ch *chaos
	if mode.name != chaosNone {
		if cl == nil {
			return nil, usageErr("-chaos %s needs the self-contained mode", mode.name)
		}
		if err := mode.checkTopology(cl); err != nil {
			return nil, err
		}
		if mode.inject != nil {
			ch = &chaos{mode: mode, cluster: cl, apis: apis, lease: cfg.Lease, hangFor: cfg.HangFor, onRedisDown: cfg.OnRedisDown,
				mixGap: cfg.MixGap, mixRounds: cfg.MixRounds, lockReplicas: cfg.LockReplicas}
			if cl.Redis != nil {
				ch.rdb = cl.Redis.Client()
				defer ch.rdb.Close()
			}
		}
	}
	run := strategyRun{cfg: cfg, apis: apis, offered: offered, demo: demo, logw: logw}
	add := func(res *StrategyResult) {
		rep.Strategies = append(rep.Strategies, *res)
		if res.Failed {
			rep.Failed = append(rep.Failed, res.Label())
		}
	}
	// Route by route, so that the strategies a route compares run one after the other.
	round := 0
	for _, route := range cfg.Routes {
		for _, strategy := range strategies {
			res, err := run.strategy(ctx, strategy, route, "", ch, mode, round)
			round++
			if err != nil {
				return rep, err
			}
			add(res)
			if mode.second != nil {
				again, err := run.underFault(ctx, strategy, route, mode, cl, len(strategies)*len(cfg.Routes)+round)
				if err != nil {
					return rep, err
				}
				again.Baseline = res.ReqPerSec
				add(again)
			}
		}
	}
	var met bool
	rep.Thresholds, met = checkThresholds(cfg.Thresholds, rep.Strategies)
	switch {
	case len(rep.Failed) > 0:
		rep.ExitCode = 1
	case !met:
		rep.ExitCode = exitThreshold
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func logf(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", a...)
	}
}

// catalogue is the reset body: cfg.Items items of cfg.Stock units; the first is the hot one.
func catalogue(cfg Config) []newItem {
	items := make([]newItem, cfg.Items)
	for i := range items {
		items[i] = newItem{SKU: fmt.Sprintf("LT-%04d", i+1), Name: fmt.Sprintf("Load test item %d", i+1),
			Stock: cfg.Stock, PriceCents: 100}
	}
	return items
}

// pickStrategies returns the strategies of the run: those of -strategies, each of which the
// servers must offer, or the chaos mode's default among those they offer.
func pickStrategies(cfg Config, mode chaosMode, offered []storeapi.Strategy) ([]string, error) {
	if len(cfg.Strategies) == 0 {
		picked := mode.defaultStrategies(offered)
		if len(picked) == 0 {
			return nil, fmt.Errorf("the servers offer no strategy for -chaos %s (GET /api/strategies)", mode.name)
		}
		return picked, nil
	}
	for _, name := range cfg.Strategies {
		if _, ok := storeapi.Find(offered, name); !ok {
			names := make([]string, len(offered))
			for i, s := range offered {
				names[i] = s.Name
			}
			return nil, usageErr("unknown strategy %q (the servers offer: %s)", name, strings.Join(names, ", "))
		}
	}
	return cfg.Strategies, nil
}

// strategyRun is what every strategy's run of one load test shares.
type strategyRun struct {
	cfg     Config
	apis    []*api
	offered []storeapi.Strategy // GET /api/strategies
	demo    bool
	logw    io.Writer
}

// strategy resets the catalogue, fires the workload routed by route (with the chaos mode's
// fault when ch is set), reconciles client timeouts, checks the invariants, and compares the
// verdict with what mode expects of the strategy's class. fault labels a run under a fault
// applied to the whole cluster (mode.second), "" for the others.
func (sr strategyRun) strategy(ctx context.Context, strategy, route, fault string, ch *chaos, mode chaosMode, round int) (*StrategyResult, error) {
	cfg, apis := sr.cfg, sr.apis
	label := strategy
	if label == "" {
		label = "(server)"
	}
	admin := apis[0]
	items, err := resetCatalogue(ctx, cfg, admin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	info, _ := storeapi.Find(sr.offered, strategy)
	w := &workload{cfg: cfg, apis: apis, items: items, strategy: strategy, hist: newHistogram(),
		keyBase: fmt.Sprintf("lt-%x-%d-%s", cfg.Seed&0xffffffff, round, strings.ReplaceAll(label, "+", "_"))}
	if sr.demo {
		w.work = cfg.Work
	}
	if route == RouteItem {
		urls := make([]string, len(apis))
		for i, a := range apis {
			urls[i] = a.base
		}
		if w.order, err = itemOrders(urls, items); err != nil {
			return nil, err
		}
	}
	progressLabel := label
	if len(cfg.Routes) > 1 {
		progressLabel += routeSuffix(route)
	}
	w.rec = linearize.NewRecorder()
	pr := &progress{label: progressLabel, total: cfg.Requests, dur: cfg.Duration, wl: w}
	if sr.logw != nil && !cfg.Quiet {
		pr.w, pr.tty = sr.logw, isTerminal(sr.logw)
	}
	var sampler *statsSampler
	if cfg.cartWorkload() {
		sampler = startSampler(ctx, admin)
	}
	start := time.Now()
	elapsed, chaosEv := fire(ctx, w, pr, ch, start, cfg.Seed+int64(round), chaosRun{strategy: info, hotID: items[0].ID, round: round})
	var samples [][]ItemStats
	if sampler != nil {
		samples = sampler.stopSampling()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var (
		replays, unresolved int
		stats               []ItemStats
		orders              []order
		f                   verdict.Findings
		figures             *CartFigures
	)
	if cfg.cartWorkload() {
		out, err := w.finishCarts(ctx, admin, strategy, samples, elapsed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		replays, unresolved, stats, orders, f, figures = out.replays, out.unresolve, out.stats, out.orders, out.findings, out.figures
		ps, projected := w.cartPurchases(orders)
		chaosEv.settle(start, ps, projected, len(apis), w.items[0].ID)
	} else {
		replays, unresolved = w.reconcile(ctx)
		// Every instance shares one database: any of them gives the state.
		if stats, err = admin.stats(ctx); err != nil {
			return nil, fmt.Errorf("%s: GET /api/stats: %w", label, err)
		}
		if orders, err = admin.orders(ctx); err != nil {
			return nil, fmt.Errorf("%s: GET /api/orders: %w", label, err)
		}
		// A server error around a commit leaves its outcome unknown: the keys with an order
		// row are replayed (ambiguous.go), which writes nothing new.
		replays += w.resolveAmbiguous(ctx, orders)
		chaosEv.settle(start, w.results, orders, len(apis), w.items[0].ID)
		f = check(strategy, w.results, stats, orders)
	}
	if strategy == "" && len(orders) > 0 {
		label = orders[0].Strategy
		info, _ = storeapi.Find(sr.offered, label)
	}
	res := &StrategyResult{Strategy: label, Fault: fault, Route: route, showRoute: len(cfg.Routes) > 1, Instances: len(apis), Requests: len(w.results), Replays: replays,
		Unresolved: unresolved, Missed: int(w.missed.Load()), InitialStock: cfg.Items * cfg.Stock,
		DurationS: elapsed.Seconds(), Items: stats, Chaos: chaosEv, Findings: f, Class: classOf(info)}
	for _, p := range w.results {
		res.Sends += len(p.Attempts)
	}
	if cfg.cartWorkload() {
		res.Requests, res.Sends, res.Carts = len(w.cartList)+len(w.holdList), int(w.sends.Load()), figures
	}
	res.ReqPerSec = float64(res.Sends) / max(elapsed.Seconds(), 1e-3)
	res.Latency, res.Distribution = latencyOf(w.hist)
	res.Verdict = f.Verdict()
	res.ExpectedSafe = mode.expectSafe(res.Class)
	res.Failed = res.ExpectedSafe && res.Verdict != verdict.Safe
	res.Reads = int(w.reads.Load())
	res.InFlight = w.inFlightSeries
	if cfg.cartWorkload() {
		res.History = w.cartHistory(ctx, cfg, items, vizPathFor(cfg, res.Label()))
	} else {
		res.History = checkHistory(ctx, cfg, w.rec.Operations(), items, vizPathFor(cfg, res.Label()))
	}
	res.History.Expected = res.ExpectedSafe
	res.History.Failed = res.ExpectedSafe && res.History.Verdict == histNotLinearizable
	res.Failed = res.Failed || res.History.Failed
	if mode.judge != nil && ch != nil {
		if missed := mode.judge(cfg, res, start, w.results, info.TakesLock); len(missed) > 0 {
			res.Violations = append(res.Violations, missed...)
			res.Failed = true
		}
	}
	return res, nil
}

// underFault runs strategy again under the mode's fault applied to the whole cluster
// (mode.second), and removes the fault after.
func (sr strategyRun) underFault(ctx context.Context, strategy, route string, mode chaosMode, cl *Cluster, round int) (*StrategyResult, error) {
	label, undo, err := mode.second(sr.cfg, cl)
	if err != nil {
		return nil, err
	}
	defer undo()
	// The label is the run's before its history is checked: the visualization files of the
	// two runs of one strategy get different names.
	return sr.strategy(ctx, strategy, route, label, nil, mode, round)
}

// resetCatalogue replaces the catalogue and returns its items by id: the first is the hot one.
func resetCatalogue(ctx context.Context, cfg Config, admin *api) ([]item, error) {
	if err := admin.reset(ctx, catalogue(cfg)); err != nil {
		return nil, fmt.Errorf("reset the catalogue: %w", err)
	}
	items, err := admin.items(ctx)
	if err != nil {
		return nil, fmt.Errorf("list items: %w", err)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	if len(items) != cfg.Items {
		return nil, fmt.Errorf("reset asked for %d items, the server lists %d", cfg.Items, len(items))
	}
	return items, nil
}

// fire runs the workload with its progress display and, in chaos mode, the pause of an
// instance. It returns once the workload is done and any paused instance is resumed.
func fire(ctx context.Context, w *workload, pr *progress, ch *chaos, start time.Time, seed int64, r chaosRun) (time.Duration, *ChaosEvent) {
	var ev *ChaosEvent
	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	if ch != nil && ch.mode.name == chaosMix && ch.mixRounds > 0 {
		r.rounds = make(chan struct{}) // -chaos mix closes it once its rounds fired
	}
	if ch != nil {
		go func() { // owner: fire, which closes stopChaos and waits on chaosDone
			defer close(chaosDone)
			ev = ch.run(ctx, stopChaos, start, r)
		}()
	} else {
		close(chaosDone)
	}
	// A fault that takes a few seconds (a failover) needs buyers of the hot item until its last
	// step (another instance holds the hot lock on the promoted replica, the stale holder is
	// resumed), and then until a purchase sent after the fault is sold (selling resumed): the
	// run's duration is extended until then. Each wait is bounded (faultWait). The other
	// faults fit their default durations and extend nothing.
	var hold chan struct{}
	loadEnded := make(chan struct{})
	holdDone := make(chan struct{})
	if ch != nil && ch.mode.keepSelling {
		hold = make(chan struct{})
		go func() { // owner: fire, which closes loadEnded and waits on holdDone
			defer close(holdDone)
			defer close(hold)
			select {
			case <-chaosDone:
			case <-loadEnded:
				return
			}
			if ev == nil || ev.FaultAt == 0 {
				return
			}
			fault := start.Add(time.Duration(ev.FaultAt * float64(time.Second))).UnixNano()
			deadline := time.NewTimer(faultWait)
			defer deadline.Stop()
			for w.lastSold.Load() <= fault {
				select {
				case <-loadEnded:
					return
				case <-ctx.Done():
					return
				case <-deadline.C:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	} else {
		hold = r.rounds // nil but with -mix-rounds
		close(holdDone)
	}
	pr.start()
	elapsed := w.run(ctx, seed, hold)
	close(loadEnded)
	<-holdDone
	close(stopChaos)
	<-chaosDone // a pause in progress ends (the instance is resumed) before anything is checked
	pr.finish()
	return elapsed, ev
}
