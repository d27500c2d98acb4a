package scenario

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// strategyRun is what every strategy's run of one load test shares.
type strategyRun struct {
	cfg     config.Config
	apis    []*client.API
	offered []storeapi.Strategy // GET /api/strategies
	demo    bool
	logw    io.Writer
}

// strategy resets the catalogue, fires the workload routed by route (with the chaos mode's
// fault when ch is set), reconciles client timeouts, checks the invariants, and compares the
// verdict with what mode expects of the strategy's class. faultLabel labels a run under a
// fault applied to the whole cluster (mode.Second), "" for the others.
func (sr strategyRun) strategy(ctx context.Context, strategy, route, faultLabel string, ch *fault.Chaos, mode fault.Mode, round int) (*report.StrategyResult, error) {
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
	var work time.Duration
	if sr.demo {
		work = cfg.Work
	}
	w, err := workload.New(cfg, apis, items, strategy, work, fmt.Sprintf("lt-%x-%d-%s", cfg.Seed&0xffffffff, round, strings.ReplaceAll(label, "+", "_")), route)
	if err != nil {
		return nil, err
	}
	progressLabel := label
	if len(cfg.Routes) > 1 {
		progressLabel += report.RouteSuffix(route)
	}
	var out io.Writer
	if sr.logw != nil && !cfg.Quiet {
		out = sr.logw
	}
	pr := workload.NewProgress(w, progressLabel, out)
	var sampler *workload.Sampler
	var holdsBefore workload.HoldCarts
	holdsRead := false
	if cfg.CartWorkload() {
		holdsBefore, holdsRead = workload.ScrapeHoldCarts(ctx, apis)
		sampler = workload.StartSampler(ctx, admin)
	}
	start := time.Now()
	elapsed, chaosEv := fire(ctx, w, pr, ch, start, cfg.Seed+int64(round), fault.Target{Strategy: info, HotID: items[0].ID, Round: round})
	var samples [][]client.ItemStats
	if sampler != nil {
		samples = sampler.Stop()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var (
		replays, unresolved int
		stats               []client.ItemStats
		orders              []client.Order
		f                   verdict.Findings
		figures             *workload.CartFigures
	)
	if cfg.CartWorkload() {
		out, err := w.FinishCarts(ctx, admin, strategy, samples, elapsed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		replays, unresolved, stats, orders, f, figures = out.Replays, out.Unresolved, out.Stats, out.Orders, out.Findings, out.Figures
		if after, ok := workload.ScrapeHoldCarts(ctx, apis); ok && holdsRead {
			figures.SetHolds(holdsBefore, after) // read after the replays: every hold of the run has ended
		}
		ps, projected := w.CartPurchases(orders)
		chaosEv.Settle(start, ps, projected, len(apis), items[0].ID)
	} else {
		replays, unresolved = w.Reconcile(ctx)
		// Every instance shares one database: any of them gives the state.
		if stats, err = admin.Stats(ctx); err != nil {
			return nil, fmt.Errorf("%s: GET /api/stats: %w", label, err)
		}
		if orders, err = admin.Orders(ctx); err != nil {
			return nil, fmt.Errorf("%s: GET /api/orders: %w", label, err)
		}
		// A server error around a commit leaves its outcome unknown: the keys with an order
		// row are replayed (checks/ambiguous.go, workload/replay.go), which writes nothing new.
		replays += w.ResolveAmbiguous(ctx, orders)
		chaosEv.Settle(start, w.Results(), orders, len(apis), items[0].ID)
		f = checks.Check(strategy, w.Results(), stats, orders)
	}
	if strategy == "" && len(orders) > 0 {
		label = orders[0].Strategy
		info, _ = storeapi.Find(sr.offered, label)
	}
	res := &report.StrategyResult{Strategy: label, Fault: faultLabel, Route: route, ShowRoute: len(cfg.Routes) > 1, Instances: len(apis), Requests: len(w.Results()), Replays: replays,
		Unresolved: unresolved, Missed: w.Missed(), InitialStock: cfg.Items * cfg.Stock,
		DurationS: elapsed.Seconds(), Items: stats, Chaos: chaosEv, Findings: f, Class: fault.ClassOf(info)}
	for _, p := range w.Results() {
		res.Sends += len(p.Attempts)
	}
	if cfg.CartWorkload() {
		res.Requests, res.Sends = w.CartRequests()
		res.Carts = figures
	}
	res.ReqPerSec = float64(res.Sends) / max(elapsed.Seconds(), 1e-3)
	res.Latency, res.Distribution = report.LatencyOf(w.Histogram())
	res.Verdict = f.Verdict()
	res.ExpectedSafe = mode.ExpectSafe(res.Class)
	res.Failed = res.ExpectedSafe && res.Verdict != verdict.Safe
	res.Reads = w.Reads()
	res.InFlight = w.InFlight()
	if cfg.CartWorkload() {
		res.History = w.CartHistory(ctx, cfg, items, checks.VizPath(cfg, res.Label()))
	} else {
		res.History = checks.History(ctx, cfg, w.Operations(), items, checks.VizPath(cfg, res.Label()))
	}
	res.History.Expected = res.ExpectedSafe
	res.History.Failed = res.ExpectedSafe && res.History.Verdict == checks.NotLinearizable
	res.Failed = res.Failed || res.History.Failed
	if mode.Judge != nil && ch != nil {
		outcome := &fault.Outcome{Event: res.Chaos, Route: res.Route, Instances: res.Instances, Oversold: res.OversoldUnits, ExpectedSafe: res.ExpectedSafe}
		if missed := mode.Judge(cfg, outcome, start, w.Results(), info.TakesLock); len(missed) > 0 {
			res.Violations = append(res.Violations, missed...)
			res.Failed = true
		}
	}
	return res, nil
}

// underFault runs strategy again under the mode's fault applied to the whole cluster
// (mode.Second), and removes the fault after.
func (sr strategyRun) underFault(ctx context.Context, strategy, route string, mode fault.Mode, cl *cluster.Cluster, round int) (*report.StrategyResult, error) {
	label, undo, err := mode.Second(sr.cfg, cl)
	if err != nil {
		return nil, err
	}
	defer undo()
	// The label is the run's before its history is checked: the visualization files of the
	// two runs of one strategy get different names.
	return sr.strategy(ctx, strategy, route, label, nil, mode, round)
}
