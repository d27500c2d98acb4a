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
)

// errUnreachable marks targets that do not answer (exit code 2).
var errUnreachable = errors.New("unreachable")

// Run runs the load test described by cfg: in self-contained mode it starts (and always stops)
// its own cluster, otherwise it uses cfg.Targets. Progress lines go to logw (nil: none).
func Run(ctx context.Context, cfg Config, logw io.Writer) (*Report, error) {
	if len(cfg.Targets) > 0 {
		return RunTargets(ctx, cfg, cfg.Targets, cfg.AdminToken, nil, logw)
	}
	ccfg := ClusterConfig{Bin: cfg.Bin, Instances: cfg.Instances, Log: logw, DB: cfg.DB}
	if cfg.Chaos != "" {
		ccfg.Lease = cfg.Lease
	}
	switch cfg.Chaos {
	case "failover":
		ccfg.Redis = TopologySentinel
	case "partition", "latency":
		ccfg.Redis = TopologyProxied
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
			WorkMS: ms(cfg.Work), Chaos: cfg.Chaos, TimeoutMS: ms(cfg.Timeout), Seed: cfg.Seed}}
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
	if cfg.Chaos != "" {
		rep.Config.LeaseMS = ms(cfg.Lease)
	}
	for i, a := range apis {
		info := InstanceInfo{URL: a.base}
		if cl != nil {
			info.PID = cl.Instances[i].PID()
		}
		rep.Instances = append(rep.Instances, info)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := a.ready(pctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("target %s %w: %v", a.base, errUnreachable, err)
		}
	}
	_, demo, err := apis[0].locks(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: GET /api/debug/locks: %w", apis[0].base, err)
	}
	rep.Demo = demo
	if !demo {
		rep.Config.WorkMS = 0 // X-Simulated-Work is refused outside demo mode: none is sent
	}
	strategies := cfg.Strategies
	if !demo {
		logf(logw, "the targets are not in demo mode: running only their own strategy, without simulated work")
		strategies = []string{""}
	}
	var ch *chaos
	if cfg.Chaos != "" {
		if cl == nil {
			return nil, usageErr("-chaos %s needs the self-contained mode", cfg.Chaos)
		}
		if err := checkTopology(cfg.Chaos, cl); err != nil {
			return nil, err
		}
		if cfg.Chaos != "latency" {
			ch = &chaos{mode: cfg.Chaos, cluster: cl, apis: apis, lease: cfg.Lease}
			if cl.Redis != nil {
				ch.rdb = cl.Redis.Client()
				defer ch.rdb.Close()
			}
		}
	}
	add := func(res *StrategyResult) {
		rep.Strategies = append(rep.Strategies, *res)
		if res.Failed {
			rep.Failed = append(rep.Failed, res.Strategy+res.Fault)
		}
	}
	for round, strategy := range strategies {
		res, err := runStrategy(ctx, cfg, apis, strategy, demo, ch, round, logw)
		if err != nil {
			return rep, err
		}
		add(res)
		if cfg.Chaos == "latency" {
			slow, err := runWithLatency(ctx, cfg, apis, cl, strategy, demo, len(strategies)+round, logw)
			if err != nil {
				return rep, err
			}
			slow.Baseline = res.ReqPerSec
			add(slow)
		}
	}
	if len(rep.Failed) > 0 {
		rep.ExitCode = 1
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

// runStrategy resets the catalogue, fires the workload (pausing an instance in chaos mode),
// reconciles client timeouts, and checks the invariants.
func runStrategy(ctx context.Context, cfg Config, apis []*api, strategy string, demo bool, ch *chaos, round int, logw io.Writer) (*StrategyResult, error) {
	label := strategy
	if label == "" {
		label = "(server)"
	}
	admin := apis[0]
	items, err := resetCatalogue(ctx, cfg, admin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	w := &workload{cfg: cfg, apis: apis, items: items, strategy: strategy, hist: newHistogram(),
		keyBase: fmt.Sprintf("lt-%x-%d-%s", cfg.Seed&0xffffffff, round, strings.ReplaceAll(label, "+", "_"))}
	if demo {
		w.work = cfg.Work
	}
	pr := &progress{label: label, total: cfg.Requests, dur: cfg.Duration, wl: w}
	if logw != nil && !cfg.Quiet {
		pr.w, pr.tty = logw, isTerminal(logw)
	}
	start := time.Now()
	elapsed, chaosEv := fire(ctx, w, pr, ch, start, cfg.Seed+int64(round), round)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	replays, unresolved := w.reconcile(ctx)

	// Every instance shares one database: any of them gives the state.
	stats, err := admin.stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: GET /api/stats: %w", label, err)
	}
	orders, err := admin.orders(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: GET /api/orders: %w", label, err)
	}
	chaosEv.settle(start, w.results, orders, len(apis), w.items[0].ID)
	f := check(strategy, w.results, stats, orders)
	if strategy == "" && len(orders) > 0 {
		label = orders[0].Strategy
	}
	res := &StrategyResult{Strategy: label, Instances: len(apis), Requests: len(w.results), Replays: replays,
		Unresolved: unresolved, Missed: int(w.missed.Load()), InitialStock: cfg.Items * cfg.Stock,
		DurationS: elapsed.Seconds(), Items: stats, Chaos: chaosEv, findings: f}
	for _, p := range w.results {
		res.Sends += len(p.Attempts)
	}
	res.ReqPerSec = float64(res.Sends) / max(elapsed.Seconds(), 1e-3)
	res.Latency, res.Distribution = latencyOf(w.hist)
	res.Verdict = f.verdict()
	chaosName := ""
	if ch != nil {
		chaosName = cfg.Chaos
	}
	res.ExpectedSafe = expectedSafe(label, len(apis), chaosName)
	res.Failed = res.ExpectedSafe && res.Verdict != VerdictSafe
	return res, nil
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
func fire(ctx context.Context, w *workload, pr *progress, ch *chaos, start time.Time, seed int64, round int) (time.Duration, *ChaosEvent) {
	var ev *ChaosEvent
	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	if ch != nil {
		go func() { // owner: fire, which closes stopChaos and waits on chaosDone
			defer close(chaosDone)
			ev = ch.run(ctx, stopChaos, start, w.strategy, w.items[0].ID, round)
		}()
	} else {
		close(chaosDone)
	}
	// A failover needs buyers of the hot item until its last step (another instance holds the
	// hot lock on the promoted replica, the stale holder is resumed), and then until a purchase
	// sent after the fault is sold (selling resumed): the run's duration is extended until
	// then. Each wait is bounded (faultWait). The pause and partition faults fit their default
	// durations (3x the lease + 4s) and extend nothing.
	var hold chan struct{}
	loadEnded := make(chan struct{})
	holdDone := make(chan struct{})
	if ch != nil && ch.mode == "failover" {
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

// checkTopology tells whether the cluster runs the Redis topology a chaos mode needs.
func checkTopology(mode string, cl *Cluster) error {
	switch {
	case mode == "failover" && cl.Sentinel == nil:
		return usageErr("-chaos failover needs the instances behind Sentinel (start the cluster with Redis: %q)", TopologySentinel)
	case (mode == "partition" || mode == "latency") && len(cl.Links) != len(cl.Instances):
		return usageErr("-chaos %s needs one proxy per instance (start the cluster with Redis: %q)", mode, TopologyProxied)
	case mode == "pause" && cl.Redis == nil:
		return usageErr("-chaos pause needs a single Redis")
	}
	return nil
}

// runWithLatency runs strategy again with cfg.Latency added to each direction of every
// instance's link to Redis, and removes it after.
func runWithLatency(ctx context.Context, cfg Config, apis []*api, cl *Cluster, strategy string, demo bool, round int, logw io.Writer) (*StrategyResult, error) {
	for _, l := range cl.Links {
		if err := l.Latency(cfg.Latency); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, l := range cl.Links {
			_ = l.Heal()
		}
	}()
	res, err := runStrategy(ctx, cfg, apis, strategy, demo, nil, round, logw)
	if err != nil {
		return nil, err
	}
	res.Fault = fmt.Sprintf(" +%s", cfg.Latency)
	res.ExpectedSafe = expectedSafe(res.Strategy, len(apis), "latency")
	res.Failed = res.ExpectedSafe && res.Verdict != VerdictSafe
	return res, nil
}
