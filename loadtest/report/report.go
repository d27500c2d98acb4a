// Package report writes what a run found: the table, the -json file, the -html page with its
// charts and the fault strip, the thresholds, and the tables of -perf and -scenario pitfalls.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/soak"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// Report is the outcome of a load test run, as written by -json.
type Report struct {
	StartedAt  time.Time        `json:"started_at"`
	Mode       string           `json:"mode"`            // "self-contained" or "target"
	Demo       bool             `json:"demo"`            // the servers accepted X-Strategy
	Redis      string           `json:"redis,omitempty"` // self-contained: "redis-server" or "miniredis"
	RedisPID   int              `json:"redis_pid,omitempty"`
	DB         string           `json:"db,omitempty"` // self-contained: "sqlite", "postgres" or "postgres (url)"
	Machine    Machine          `json:"machine"`
	Config     ReportConfig     `json:"config"`
	Instances  []InstanceInfo   `json:"instances"`
	Strategies []StrategyResult `json:"strategies"`
	Failed     []string         `json:"failed"`    // strategies called safe that broke an invariant
	ExitCode   int              `json:"exit_code"` // 1 when Failed is not empty
	// -threshold (thresholds.go); ExitCode is 3 when one was missed and Failed is empty.
	Thresholds []ThresholdResult `json:"thresholds,omitempty"`
	// -soak (loadtest/soak): every series sampled over the whole run and its fit; Leaked names
	// the series judged LEAK, and ExitCode is ExitLeak when one was and Failed is empty.
	Soak   *soak.Result `json:"soak,omitempty"`
	Leaked []string     `json:"leaked,omitempty"`
}

// ExitLeak is the exit status of a -soak run whose strategies kept every invariant but one of
// whose series grew past its bound (a LEAK). It wins over a missed -threshold (ExitThreshold).
const ExitLeak = 4

// Machine describes where the load test ran.
type Machine struct {
	CPUs int    `json:"cpus"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
	Go   string `json:"go"`
}

// InstanceInfo names one storefront the run talked to.
type InstanceInfo struct {
	URL string `json:"url"`
	PID int    `json:"pid,omitempty"` // self-contained mode only
}

// ReportConfig is the workload, as run.
type ReportConfig struct {
	Items       int      `json:"items"`
	Stock       int      `json:"stock"`
	Requests    int      `json:"requests"`
	DurationS   float64  `json:"duration_s"`
	Concurrency int      `json:"concurrency"`
	Rate        float64  `json:"rate"`
	Quantity    int      `json:"quantity"`
	Hot         float64  `json:"hot"`
	Retry       float64  `json:"retry"`
	WorkMS      float64  `json:"work_ms"`
	Chaos       string   `json:"chaos"`
	LeaseMS     float64  `json:"lease_ms,omitempty"`
	TimeoutMS   float64  `json:"timeout_ms"`
	Seed        int64    `json:"seed"`
	Routes      []string `json:"routes"` // -route: how purchases reached the instances, each strategy once per route
	// The open model and the checked history.
	Spike       bool    `json:"spike,omitempty"`        // open model: 0 to Rate in one second, then held
	LatencyFrom string  `json:"latency_from,omitempty"` // "intended start" in the open model (coordinated omission corrected)
	Reads       float64 `json:"reads"`                  // -reads
	Workload    string  `json:"workload,omitempty"`     // -workload (workload/cart.go)
	HoldTTLMS   float64 `json:"hold_ttl_ms,omitempty"`  // -workload holds: -hold-ttl
}

// Latency holds percentiles in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// LatencyPoint is one point of the latency distribution.
type LatencyPoint struct {
	Percentile float64 `json:"percentile"`
	MS         float64 `json:"ms"`
}

// StrategyResult is one strategy's row of the report.
type StrategyResult struct {
	Strategy     string             `json:"strategy"`
	Route        string             `json:"route"`              // RouteRoundRobin or RouteItem
	Workload     string             `json:"workload,omitempty"` // the run's workload (config.WorkloadPurchase, ...)
	Instances    int                `json:"instances"`
	Requests     int                `json:"requests"`   // purchases (idempotency keys)
	Sends        int                `json:"sends"`      // HTTP purchase requests, -retry copies included, replays not
	Replays      int                `json:"replays"`    // purchases replayed after a client timeout
	Unresolved   int                `json:"unresolved"` // replays that got no answer either
	Missed       int                `json:"missed"`     // open model: arrivals dropped at the in-flight cap
	InitialStock int                `json:"initial_stock"`
	DurationS    float64            `json:"duration_s"`
	ReqPerSec    float64            `json:"req_per_s"` // sends per second
	Latency      Latency            `json:"latency"`
	Distribution []LatencyPoint     `json:"latency_distribution"`
	Items        []client.ItemStats `json:"items"` // /api/stats after the run
	Chaos        *fault.Event       `json:"chaos,omitempty"`
	Fault        string             `json:"fault,omitempty"`              // -chaos latency: " +20ms" on the run with the latency
	Baseline     float64            `json:"baseline_req_per_s,omitempty"` // -chaos latency: req/s of the run without it
	Class        fault.Class        `json:"class"`                        // how it stands up to faults, from what the server says of it (fault/class.go, fault/modes.go)
	ExpectedSafe bool               `json:"expected_safe"`                // its class is expected SAFE in the run's setting (fault/class.go, fault/modes.go)
	Verdict      string             `json:"verdict"`
	Failed       bool               `json:"failed"` // expected safe, verdict not SAFE (or history NOT linearizable)
	Reads        int                `json:"reads"`  // reads of an item's stock mixed into the workload (-reads)
	// The checked history (history.go) and, in the open model, the requests in flight over time.
	History  *checks.HistoryResult    `json:"history,omitempty"`
	InFlight []workload.InFlightPoint `json:"in_flight,omitempty"`
	Carts    *workload.CartFigures    `json:"carts,omitempty"` // -workload cart and holds: the figures of the carts (workload/figures.go)
	verdict.Findings
	ShowRoute    bool `json:"-"` // the run compares routes: the label names this row's
	ShowWorkload bool `json:"-"` // the run has several workloads: the label names this row's
}

// Label names the row: the strategy, its fault (-chaos latency) and, when the run compares
// routes or workloads, its route and its workload.
func (s StrategyResult) Label() string {
	l := s.Strategy + s.Fault
	if s.ShowRoute {
		l += RouteSuffix(s.Route)
	}
	if s.ShowWorkload {
		l += " [" + s.Workload + "]"
	}
	return l
}

// RouteSuffix is the route as the rows of a run comparing routes show it.
func RouteSuffix(route string) string { return " @" + route }

// distributionPercentiles are the points of the latency chart.
var distributionPercentiles = []float64{0, 10, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90, 95, 97.5, 99, 99.5, 99.9, 100}

func LatencyOf(h *hdrhistogram.Histogram) (Latency, []LatencyPoint) {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	if h.TotalCount() == 0 {
		return Latency{}, nil
	}
	l := Latency{P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		Max: ms(h.Max()), Mean: h.Mean() / 1000}
	pts := make([]LatencyPoint, 0, len(distributionPercentiles))
	for _, p := range distributionPercentiles {
		v := h.ValueAtQuantile(p)
		if p == 0 {
			v = h.Min()
		}
		pts = append(pts, LatencyPoint{Percentile: p, MS: ms(v)})
	}
	return l, pts
}

// WriteJSON writes r to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints a line on the setting, one row per strategy, then the chaos events and
// the violations of the strategies called safe.
func (r *Report) WriteTable(w io.Writer) {
	c := r.Config
	unit := "purchases"
	switch c.Workload {
	case config.WorkloadCart:
		unit = "checkouts"
	case config.WorkloadHolds:
		unit = fmt.Sprintf("holds (ttl %s) and checkouts", fmtMS(c.HoldTTLMS))
	}
	bound := fmt.Sprintf("%d %s", c.Requests, unit)
	if c.Requests == 0 {
		bound = fmt.Sprintf("%gs", c.DurationS)
	}
	if strings.Contains(c.Workload, ",") {
		bound = fmt.Sprintf("%s of each workload (%s)", bound, c.Workload)
	}
	model := fmt.Sprintf("%d clients", c.Concurrency)
	if c.Rate > 0 {
		model = fmt.Sprintf("%g/s open model", c.Rate)
		if c.Spike {
			model = fmt.Sprintf("open model, spike 0 to %g/s in 1s then held", c.Rate)
		}
		model += ", latency from intended start"
	}
	fmt.Fprintf(w, "%s, %d instance(s)%s%s; %d item(s) x %d units; %s per strategy, %s, hot %g, retry %g, quantity 1..%d, work %gms, route %s%s; %d CPUs\n\n",
		r.Mode, len(r.Instances), prefixed(", Redis: ", r.Redis), prefixed(", database: ", r.DB), c.Items, c.Stock, bound, model, c.Hot, c.Retry,
		c.Quantity, c.WorkMS, routesOf(c.Routes), prefixed(", chaos: ", c.Chaos), r.Machine.CPUs)
	width := len("strategy")
	for _, s := range r.Strategies {
		width = max(width, len(s.Label()))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tinstances\trequests\tsold/stock\tsold-out\terrors\toversold\tlost upd\tno 201\tdup orders\twasted work\tbatch\treq/s\tp50\tp90\tp99\tmax\t  verdict\n", width, "strategy")
	for _, s := range r.Strategies {
		shown := s.Verdict
		switch {
		case s.Failed && s.Verdict == verdict.Safe && s.History != nil && s.History.Failed:
			shown += " (FAIL: history NOT linearizable)"
		case s.Failed && s.ExpectedSafe && s.Verdict != verdict.Safe:
			shown += " (FAIL: called safe)"
		case s.Failed: // a fault's own target missed (judge): the lines below say which
			shown += " (FAIL: see below)"
		case !s.ExpectedSafe && s.Verdict != verdict.Safe:
			shown += " (expected)"
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d/%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t  %s\n",
			width, s.Label(), s.Instances, s.Requests, s.SoldUnits, s.InitialStock, s.SoldOutAnswers, codes(s.ErrorsByCode),
			s.OversoldUnits, s.LostUpdates, s.OrdersWithout201, s.DuplicateOrders, fmtWork(s.WastedWorkMS), fmtBatch(s.MeanBatch), s.ReqPerSec,
			fmtMS(s.Latency.P50), fmtMS(s.Latency.P90), fmtMS(s.Latency.P99), fmtMS(s.Latency.Max), shown)
	}
	_ = tw.Flush()
	for _, s := range r.Strategies {
		if s.Chaos != nil {
			fmt.Fprintf(w, "chaos %s: %s\n", s.Label(), s.Chaos)
			if line := laneSummary(s.Chaos); line != "" {
				fmt.Fprintf(w, "  lanes: %s\n", line)
			}
			switch {
			case s.Route == config.RouteItem && !s.ExpectedSafe && s.Verdict == verdict.Safe:
				// Said once below, for every strategy that routing by item kept SAFE.
			case s.Class == fault.ClassLock && !s.ExpectedSafe && s.Chaos.Paused && s.Chaos.Confirmed && s.Verdict == verdict.Safe:
				fmt.Fprintf(w, "  %s stayed SAFE this time: on resume its watchdog declared the loss before the holder's"+
					" write (a race it wins in some runs); run again to see the stale write oversell\n", s.Label())
			}
		}
	}
	r.writeRatios(w)
	r.writeCarts(w)
	for _, s := range r.Strategies {
		if s.Fault != "" && s.Baseline > 0 {
			fmt.Fprintf(w, "latency %s: %.0f req/s against %.0f without it (%.2fx)\n", s.Label(), s.ReqPerSec, s.Baseline, s.ReqPerSec/s.Baseline)
		}
	}
	for _, s := range r.Strategies {
		if s.Missed > 0 {
			fmt.Fprintf(w, "%s: %d arrivals dropped: %d requests were already in flight (raise -concurrency)\n",
				s.Label(), s.Missed, c.Concurrency)
		}
		if s.Unresolved > 0 {
			fmt.Fprintf(w, "%s: %d timed-out requests got no answer when replayed either\n", s.Label(), s.Unresolved)
		}
	}
	r.writeHistory(w)
	r.writeThresholds(w)
	r.writeSoak(w)
	for _, s := range r.Strategies {
		if s.Failed {
			for _, v := range s.Violations {
				fmt.Fprintf(w, "%s: %s\n", s.Label(), v)
			}
		}
	}
}

// writeRatios prints, per route, lock+guard's req/s and p99 against guard's and both mean
// batches (not under a chaos fault, which decides them): what routing by item changes. It names
// the strategies expected to break that routing by item kept SAFE.
func (r *Report) writeRatios(w io.Writer) {
	var kept []string
	for _, s := range r.Strategies {
		if s.Route == config.RouteItem && !s.ExpectedSafe && s.Verdict == verdict.Safe {
			kept = append(kept, s.Label())
		}
	}
	if len(kept) > 0 {
		fmt.Fprintf(w, "%s stayed SAFE routed by item: every buyer of an item reached one process, so no other process"+
			" sold it meanwhile (a paused holder's buyers waited with it); that lasts until the routing moves an item"+
			" (an instance down, one added): safety must not rest on routing\n", strings.Join(kept, ", "))
	}
	if r.Config.Chaos != "" {
		return
	}
	for _, route := range r.Config.Routes {
		var guard, lockGuard *StrategyResult
		for i := range r.Strategies {
			s := &r.Strategies[i]
			if s.Route != route || s.Fault != "" {
				continue
			}
			switch s.Strategy {
			case "guard":
				guard = s
			case "lock+guard":
				lockGuard = s
			}
		}
		if guard == nil || lockGuard == nil || guard.ReqPerSec == 0 || guard.Latency.P99 == 0 {
			continue
		}
		fmt.Fprintf(w, "route %s: lock+guard / guard: req/s %.2fx, p99 %.2fx; mean batch %s (guard %s)\n", route,
			lockGuard.ReqPerSec/guard.ReqPerSec, lockGuard.Latency.P99/guard.Latency.P99, fmtBatch(lockGuard.MeanBatch), fmtBatch(guard.MeanBatch))
	}
}

// fmtBatch shows a mean batch (orders per write transaction); "-" when no order was written.
func fmtBatch(b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", b)
}

// routesOf shows the -route of a run.
func routesOf(routes []string) string {
	if len(routes) == 0 {
		return config.RouteRoundRobin
	}
	return strings.Join(routes, " and ")
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// codes renders errors by code as "code:n code:n", "-" when there are none.
func codes(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	return counted(m, ":")
}

// counted renders m as "key<sep>n" pairs in key order, separated by spaces.
func counted(m map[string]int, sep string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s%s%d", k, sep, m[k])
	}
	return strings.Join(parts, " ")
}

// fmtWork renders an amount of simulated work: "0" when none, else in ms or s.
func fmtWork(ms float64) string {
	if ms == 0 {
		return "0"
	}
	return fmtMS(ms)
}

func fmtMS(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.1fms", ms)
}
