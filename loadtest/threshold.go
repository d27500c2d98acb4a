package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// exitThreshold is the exit status of a run whose strategies kept every invariant but missed a
// -threshold (a broken invariant, exit 1, takes precedence).
const exitThreshold = 3

// threshold is one -threshold expression: a metric of each strategy's run, a comparison and a
// bound, e.g. p99<200ms or errors<1%.
type threshold struct {
	Expr   string  `json:"expr"`
	Metric string  `json:"metric"` // p50, p90, p99, max, mean (ms), errors (%), rps (sends/s)
	Op     string  `json:"op"`     // <, <=, >, >=
	Bound  float64 `json:"bound"`  // in the metric's unit
}

// thresholdMetrics are the metrics a -threshold can name, with their unit.
var thresholdMetrics = map[string]string{"p50": "ms", "p90": "ms", "p99": "ms", "max": "ms", "mean": "ms", "errors": "%", "rps": "/s"}

// thresholdList is the -threshold flag: repeatable, each value one or more comma-separated
// expressions.
type thresholdList []threshold

func (l *thresholdList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, t := range *l {
		parts[i] = t.Expr
	}
	return strings.Join(parts, ",")
}

func (l *thresholdList) Set(v string) error {
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		t, err := parseThreshold(e)
		if err != nil {
			return err
		}
		*l = append(*l, t)
	}
	return nil
}

// parseThreshold parses one expression: metric, operator, bound. A latency bound is a
// duration (200ms, 1.5s; a bare number is milliseconds), an error bound a percentage (1%; a
// bare number is a percentage too), a throughput bound a number of requests per second.
func parseThreshold(expr string) (threshold, error) {
	s := strings.ReplaceAll(expr, " ", "")
	i := strings.IndexAny(s, "<>")
	if i <= 0 {
		return threshold{}, fmt.Errorf("threshold %q: want metric<bound or metric>bound (metrics: p50, p90, p99, max, mean, errors, rps)", expr)
	}
	t := threshold{Expr: s, Metric: strings.ToLower(s[:i]), Op: s[i : i+1]}
	rest := s[i+1:]
	if strings.HasPrefix(rest, "=") {
		t.Op += "="
		rest = rest[1:]
	}
	unit, ok := thresholdMetrics[t.Metric]
	if !ok {
		return threshold{}, fmt.Errorf("threshold %q: unknown metric %q (metrics: p50, p90, p99, max, mean, errors, rps)", expr, t.Metric)
	}
	var err error
	switch unit {
	case "ms":
		if f, ferr := strconv.ParseFloat(rest, 64); ferr == nil {
			t.Bound = f
		} else {
			var d time.Duration
			d, err = time.ParseDuration(rest)
			t.Bound = ms(d)
		}
	case "%":
		t.Bound, err = strconv.ParseFloat(strings.TrimSuffix(rest, "%"), 64)
	default:
		t.Bound, err = strconv.ParseFloat(rest, 64)
	}
	if err != nil || rest == "" || t.Bound < 0 {
		return threshold{}, fmt.Errorf("threshold %q: bad bound %q", expr, rest)
	}
	return t, nil
}

// value returns the metric of a strategy's run, in the metric's unit.
func (t threshold) value(s StrategyResult) float64 {
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
	}
	return s.ReqPerSec
}

func (t threshold) holds(v float64) bool {
	switch t.Op {
	case "<":
		return v < t.Bound
	case "<=":
		return v <= t.Bound
	case ">":
		return v > t.Bound
	}
	return v >= t.Bound
}

// ThresholdResult is one -threshold checked on one strategy's run.
type ThresholdResult struct {
	Expr     string  `json:"expr"`
	Strategy string  `json:"strategy"`
	Value    float64 `json:"value"` // in the metric's unit
	Unit     string  `json:"unit"`  // ms, % or /s
	Passed   bool    `json:"passed"`
}

// checkThresholds checks every threshold on every strategy's run.
func checkThresholds(ts []threshold, strategies []StrategyResult) (out []ThresholdResult, passed bool) {
	passed = true
	for _, t := range ts {
		for _, s := range strategies {
			v := t.value(s)
			r := ThresholdResult{Expr: t.Expr, Strategy: s.Label(), Value: v, Unit: thresholdMetrics[t.Metric], Passed: t.holds(v)}
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
