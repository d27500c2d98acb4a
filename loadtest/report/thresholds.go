package report

import (
	"fmt"
	"io"
	"math"

	"github.com/stockguard/stockguard/loadtest/config"
)

// ExitThreshold is the exit status of a run whose strategies kept every invariant but missed a
// -threshold (a broken invariant, exit 1, takes precedence).
const ExitThreshold = 3

// metricOf returns the metric of t of a strategy's run, in the metric's unit.
func metricOf(t config.Threshold, s StrategyResult) float64 {
	switch t.Metric {
	case "p50":
		return s.Latency.P50
	case "p90":
		return s.Latency.P90
	case "p99":
		return s.Latency.P99
	case "max":
		return s.Latency.Max
	case "mean":
		return s.Latency.Mean
	case "errors":
		errs := 0
		for _, n := range s.ErrorsByCode {
			errs += n
		}
		return 100 * float64(errs) / float64(max(s.Sends, 1))
	case "gap":
		// -chaos kill: the worst sales gap after a kill of the hot lock's holder; +Inf
		// (missed) in a run without kills or after a kill no survivor sold.
		if s.Chaos == nil {
			return math.Inf(1)
		}
		return s.Chaos.Kill.WorstGapMS()
	}
	return s.ReqPerSec
}

// ThresholdResult is one -threshold checked on one strategy's run.
type ThresholdResult struct {
	Expr     string  `json:"expr"`
	Strategy string  `json:"strategy"`
	Value    float64 `json:"value"` // in the metric's unit
	Unit     string  `json:"unit"`  // ms, % or /s
	Passed   bool    `json:"passed"`
}

// CheckThresholds checks every threshold on every strategy's run.
func CheckThresholds(ts []config.Threshold, strategies []StrategyResult) (out []ThresholdResult, passed bool) {
	passed = true
	for _, t := range ts {
		for _, s := range strategies {
			v := metricOf(t, s)
			r := ThresholdResult{Expr: t.Expr, Strategy: s.Label(), Value: v, Unit: config.ThresholdMetrics[t.Metric], Passed: t.Holds(v)}
			passed = passed && r.Passed
			out = append(out, r)
		}
	}
	return out, passed
}

// writeThresholds prints one line per threshold and strategy.
func (r *Report) writeThresholds(w io.Writer) {
	if len(r.Thresholds) == 0 {
		return
	}
	width := 14
	for _, t := range r.Thresholds {
		width = max(width, len(t.Strategy))
	}
	fmt.Fprintln(w, "\nthresholds:")
	for _, t := range r.Thresholds {
		shown := "ok"
		if !t.Passed {
			shown = "MISSED"
		}
		fmt.Fprintf(w, "  %-16s %-*s %10.2f%-2s  %s\n", t.Expr, width, t.Strategy, t.Value, t.Unit, shown)
	}
}
