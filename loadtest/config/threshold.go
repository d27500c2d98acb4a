package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Threshold is one -threshold expression: a metric of each strategy's run, a comparison and a
// bound, e.g. p99<200ms or errors<1%.
type Threshold struct {
	Expr   string  `json:"expr"`
	Metric string  `json:"metric"` // p50, p90, p99, max, mean (ms), errors (%), rps (sends/s), gap (ms: -chaos kill's worst sales gap)
	Op     string  `json:"op"`     // <, <=, >, >=
	Bound  float64 `json:"bound"`  // in the metric's unit
}

// ThresholdMetrics are the metrics a -threshold can name, with their unit.
var ThresholdMetrics = map[string]string{"p50": "ms", "p90": "ms", "p99": "ms", "max": "ms", "mean": "ms", "errors": "%", "rps": "/s", "gap": "ms"}

// ThresholdList is the -threshold flag: repeatable, each value one or more comma-separated
// expressions.
type ThresholdList []Threshold

func (l *ThresholdList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, t := range *l {
		parts[i] = t.Expr
	}
	return strings.Join(parts, ",")
}

func (l *ThresholdList) Set(v string) error {
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		t, err := ParseThreshold(e)
		if err != nil {
			return err
		}
		*l = append(*l, t)
	}
	return nil
}

// ParseThreshold parses one expression: metric, operator, bound. A latency bound is a
// duration (200ms, 1.5s; a bare number is milliseconds), an error bound a percentage (1%; a
// bare number is a percentage too), a throughput bound a number of requests per second.
func ParseThreshold(expr string) (Threshold, error) {
	s := strings.ReplaceAll(expr, " ", "")
	i := strings.IndexAny(s, "<>")
	if i <= 0 {
		return Threshold{}, fmt.Errorf("threshold %q: want metric<bound or metric>bound (metrics: p50, p90, p99, max, mean, errors, rps, gap)", expr)
	}
	t := Threshold{Expr: s, Metric: strings.ToLower(s[:i]), Op: s[i : i+1]}
	rest := s[i+1:]
	if strings.HasPrefix(rest, "=") {
		t.Op += "="
		rest = rest[1:]
	}
	unit, ok := ThresholdMetrics[t.Metric]
	if !ok {
		return Threshold{}, fmt.Errorf("threshold %q: unknown metric %q (metrics: p50, p90, p99, max, mean, errors, rps, gap)", expr, t.Metric)
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
		return Threshold{}, fmt.Errorf("threshold %q: bad bound %q", expr, rest)
	}
	return t, nil
}

func (t Threshold) Holds(v float64) bool {
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
