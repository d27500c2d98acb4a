// Package scenario runs what the command asks for: the comparison of the strategies (with a
// fault, routes, workloads), -perf, and -scenario pitfalls; and it parses the flags.
package scenario

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

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// errUnreachable marks targets that do not answer (exit code 2).
var errUnreachable = errors.New("unreachable")

// readyWithin bounds the wait for every target's /readyz before a run.
const readyWithin = 10 * time.Second

// Run runs the load test described by cfg: in self-contained mode it starts (and always stops)
// its own cluster, otherwise it uses cfg.Targets. Progress lines go to logw (nil: none).
func Run(ctx context.Context, cfg config.Config, logw io.Writer) (*report.Report, error) {
	if len(cfg.Targets) > 0 {
		return RunTargets(ctx, cfg, cfg.Targets, cfg.AdminToken, nil, logw)
	}
	mode := fault.ModeFor(cfg)
	if mode.Name == fault.ChaosMix {
		// The schedule restarts redis-server: go-redis's lines on the refused dials of the
		// load test's own clients meanwhile are expected, not news.
		redis.SetLogger(QuietRedis{})
	}
	ccfg := cluster.Config{Bin: cfg.Bin, Instances: cfg.Instances, Log: logw, DB: cfg.DB, Redis: mode.Topology}
	if mode.Name != fault.ChaosNone {
		ccfg.Lease = cfg.Lease
	}
	if mode.Args != nil {
		ccfg.Args = mode.Args(cfg)
	}
	if cfg.StreamHold > 0 {
		ccfg.Args = append(ccfg.Args, "--stream-hold", cfg.StreamHold.String())
	}
	if cfg.NoStream {
		ccfg.Args = append(ccfg.Args, "--stream-alone=false")
	}
	cl, err := cluster.Start(ctx, ccfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, logw)
}

// RunTargets runs every strategy of cfg against the storefronts at urls. cl is the cluster that
// runs them when the load test started them itself (needed by -chaos pause), else nil.
func RunTargets(ctx context.Context, cfg config.Config, urls []string, token string, cl *cluster.Cluster, logw io.Writer) (*report.Report, error) {
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	if len(cfg.Routes) == 0 {
		cfg.Routes = []string{config.RouteRoundRobin}
	}
	hc := client.NewHTTPClient(cfg.Concurrency, cfg.Timeout)
	defer hc.CloseIdleConnections()
	apis := make([]*client.API, len(urls))
	for i, u := range urls {
		apis[i] = &client.API{Base: u, Token: token, HC: hc}
	}
	rep := &report.Report{StartedAt: time.Now().UTC(), Mode: "target",
		Machine: report.Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()},
		Config: report.ReportConfig{Items: cfg.Items, Stock: cfg.Stock, Requests: cfg.Requests, DurationS: cfg.Duration.Seconds(),
			Concurrency: cfg.Concurrency, Rate: cfg.Rate, Quantity: cfg.Quantity, Hot: cfg.Hot, Retry: cfg.Retry,
			WorkMS: ms(cfg.Work), Chaos: cfg.Chaos, TimeoutMS: ms(cfg.Timeout), Seed: cfg.Seed, Routes: cfg.Routes,
			Spike: cfg.Spike, Reads: cfg.Reads, Workload: strings.Join(workloadsOf(cfg), ",")}}
	if cfg.HasWorkload(config.WorkloadHolds) {
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
	mode := fault.ModeFor(cfg)
	if mode.Name != fault.ChaosNone {
		rep.Config.LeaseMS = ms(cfg.Lease)
	}
	for i, a := range apis {
		info := report.InstanceInfo{URL: a.Base}
		if cl != nil {
			info.PID = cl.Instances[i].PID()
		}
		rep.Instances = append(rep.Instances, info)
		// Ready within a few seconds: a storefront that answers 503 may be waiting for its
		// Redis (a Sentinel set settling after the last run's failover, a breaker's probe).
		pctx, cancel := context.WithTimeout(ctx, readyWithin)
		err := a.Ready(pctx)
		for err != nil && pctx.Err() == nil {
			select {
			case <-pctx.Done():
			case <-time.After(100 * time.Millisecond):
				err = a.Ready(pctx)
			}
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("target %s %w: %v", a.Base, errUnreachable, err)
		}
	}
	demo, err := apis[0].Demo(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: GET /api/debug/locks: %w", apis[0].Base, err)
	}
	rep.Demo = demo
	if !demo {
		rep.Config.WorkMS = 0 // X-Simulated-Work is refused outside demo mode: none is sent
	}
	offered, err := apis[0].Strategies(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", apis[0].Base, err)
	}
	strategies, err := pickStrategies(cfg, mode, offered)
	if err != nil {
		return nil, err
	}
	if cfg.AnyCartWorkload() && len(cfg.Strategies) == 0 && len(workload.CartOnly(strategies)) == 0 {
		return nil, workload.ErrNoCartStrategy
	}
	if !demo {
		logf(logw, "the targets are not in demo mode: running only their own strategy, without simulated work")
		strategies = []string{""}
	}
	var ch *fault.Chaos
	if mode.Name != fault.ChaosNone {
		if cl == nil {
			return nil, usageErr("-chaos %s needs the self-contained mode", mode.Name)
		}
		if err := mode.Check(cl); err != nil {
			return nil, err
		}
		if mode.Fault != nil {
			ch = fault.NewChaos(mode, cl, apis, cfg)
			defer ch.Close()
		}
	}
	var sk *soakRun
	if cfg.Soak && cl != nil && cl.Redis != nil {
		sk = startSoak(ctx, cfg, cl)
		defer func() {
			if sk != nil {
				sk.stop()
			}
		}()
	}
	workloads := workloadsOf(cfg)
	run := strategyRun{cfg: cfg, apis: apis, offered: offered, demo: demo, logw: logw}
	add := func(res *report.StrategyResult) {
		res.Workload, res.ShowWorkload = run.cfg.Workload, len(workloads) > 1
		rep.Strategies = append(rep.Strategies, *res)
		if res.Failed {
			rep.Failed = append(rep.Failed, res.Label())
		}
	}
	// Route by route, so that the strategies a route compares run one after the other; each
	// strategy runs each workload in turn (-workload purchase,cart,holds under -chaos mix), for
	// -duration each: every run is judged alone, by its own workload's checks and history model,
	// and must fire every kind of the fault schedule.
	round := 0
	total := len(strategies) * len(cfg.Routes) * len(workloads)
	for _, route := range cfg.Routes {
		for _, strategy := range strategies {
			if sk != nil && (len(strategies) > 1 || len(cfg.Routes) > 1) {
				// Each strategy's load its own series (soak.Recorder.SetPhase), and each route's.
				phase := strategy
				if len(cfg.Routes) > 1 {
					phase += " " + route
				}
				sk.rec.SetPhase(phase)
			}
			for _, wl := range workloads {
				run.cfg.Workload = wl
				if run.cfg.CartWorkload() && len(cfg.Strategies) == 0 && len(workload.CartOnly([]string{strategy})) == 0 {
					continue // the default strategies: those that sell no carts run the purchase workload alone
				}
				res, err := run.strategy(ctx, strategy, route, "", ch, mode, round)
				round++
				if err != nil {
					return rep, err
				}
				add(res)
				if mode.Second != nil {
					again, err := run.underFault(ctx, strategy, route, mode, cl, total+round)
					if err != nil {
						return rep, err
					}
					again.Baseline = res.ReqPerSec
					add(again)
				}
			}
		}
	}
	if sk != nil {
		judgeSoak(rep, sk.stop(), logw)
		sk = nil
	}
	var met bool
	rep.Thresholds, met = report.CheckThresholds(cfg.Thresholds, rep.Strategies)
	switch {
	case len(rep.Failed) > 0:
		rep.ExitCode = 1
	case len(rep.Leaked) > 0:
		rep.ExitCode = report.ExitLeak
	case !met:
		rep.ExitCode = report.ExitThreshold
	}
	return rep, nil
}

// workloadsOf returns the workloads of the run: -workload's list, or the one Workload of a
// configuration built by hand.
func workloadsOf(cfg config.Config) []string {
	if len(cfg.Workloads) > 0 {
		return cfg.Workloads
	}
	if cfg.Workload == "" {
		return []string{config.WorkloadPurchase}
	}
	return []string{cfg.Workload}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func logf(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", a...)
	}
}

// catalogue is the reset body: cfg.Items items of cfg.Stock units; the first is the hot one.
func catalogue(cfg config.Config) []client.NewItem {
	items := make([]client.NewItem, cfg.Items)
	for i := range items {
		items[i] = client.NewItem{SKU: fmt.Sprintf("LT-%04d", i+1), Name: fmt.Sprintf("Load test item %d", i+1),
			Stock: cfg.Stock, PriceCents: 100}
	}
	return items
}

// pickStrategies returns the strategies of the run: those of -strategies, each of which the
// servers must offer, or the chaos mode's default among those they offer.
func pickStrategies(cfg config.Config, mode fault.Mode, offered []storeapi.Strategy) ([]string, error) {
	if len(cfg.Strategies) == 0 {
		picked := mode.DefaultStrategies(offered)
		if len(picked) == 0 {
			return nil, fmt.Errorf("the servers offer no strategy for -chaos %s (GET /api/strategies)", mode.Name)
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

// resetCatalogue replaces the catalogue and returns its items by id: the first is the hot one.
func resetCatalogue(ctx context.Context, cfg config.Config, admin *client.API) ([]client.Item, error) {
	if err := admin.Reset(ctx, catalogue(cfg)); err != nil {
		return nil, fmt.Errorf("reset the catalogue: %w", err)
	}
	items, err := admin.Items(ctx)
	if err != nil {
		return nil, fmt.Errorf("list items: %w", err)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	if len(items) != cfg.Items {
		return nil, fmt.Errorf("reset asked for %d items, the server lists %d", cfg.Items, len(items))
	}
	return items, nil
}
