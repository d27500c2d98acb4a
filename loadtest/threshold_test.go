package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseThreshold(t *testing.T) {
	for expr, want := range map[string]Threshold{
		"p99<200ms":   {Expr: "p99<200ms", Metric: "p99", Op: "<", Bound: 200},
		"P50 <= 1.5s": {Expr: "P50<=1.5s", Metric: "p50", Op: "<=", Bound: 1500},
		"max<80":      {Expr: "max<80", Metric: "max", Op: "<", Bound: 80},
		"errors<1%":   {Expr: "errors<1%", Metric: "errors", Op: "<", Bound: 1},
		"errors<0.5":  {Expr: "errors<0.5", Metric: "errors", Op: "<", Bound: 0.5},
		"rps>=500":    {Expr: "rps>=500", Metric: "rps", Op: ">=", Bound: 500},
	} {
		got, err := ParseThreshold(expr)
		require.NoError(t, err, expr)
		assert.Equal(t, want, got, expr)
	}
	for _, bad := range []string{"", "p99", "<200ms", "p42<1s", "p99<", "p99<fast", "errors<-1%", "rps>lots", "p99=200ms"} {
		_, err := ParseThreshold(bad)
		assert.Error(t, err, bad)
	}
}

func TestThresholdsHold(t *testing.T) {
	s := StrategyResult{Strategy: "guard", Sends: 200, ReqPerSec: 450, Latency: Latency{P99: 180, Max: 250}}
	s.ErrorsByCode = map[string]int{"timeout": 1, "lock_timeout": 2}
	var ts ThresholdList
	require.NoError(t, ts.Set("p99<200ms, max<250ms"))
	require.NoError(t, ts.Set("errors<1%"))
	require.NoError(t, ts.Set("rps>400,max<=250ms"))
	res, ok := CheckThresholds(ts, []StrategyResult{s})
	assert.False(t, ok)
	require.Len(t, res, 5)
	assert.True(t, res[0].Passed, "p99 180 < 200")
	assert.False(t, res[1].Passed, "max 250 is not < 250")
	assert.False(t, res[2].Passed, "3 errors of 200 sends is 1.5%")
	assert.InDelta(t, 1.5, res[2].Value, 1e-9)
	assert.True(t, res[3].Passed)
	assert.True(t, res[4].Passed)
	_, ok = CheckThresholds(ts[:1], []StrategyResult{s})
	assert.True(t, ok)
}

func TestParseConfigThresholds(t *testing.T) {
	cfg, err := ParseConfig([]string{"-threshold", "p99<200ms,errors<1%", "-threshold", "rps>10"}, nil)
	require.NoError(t, err)
	require.Len(t, cfg.Thresholds, 3)
	assert.Equal(t, "rps", cfg.Thresholds[2].Metric)
	_, err = ParseConfig([]string{"-threshold", "p99<soon"}, nil)
	var ue *usageError
	assert.ErrorAs(t, err, &ue)
	_, err = ParseConfig([]string{"-spike"}, nil)
	assert.ErrorAs(t, err, &ue, "-spike needs -rate")
}

// TestMainThresholdExitCode: a missed threshold exits 3 (distinct from a broken invariant, 1),
// a met one 0.
func TestMainThresholdExitCode(t *testing.T) {
	_, srv := newFake(t, true)
	args := []string{"-target", srv.URL, "-admin-token", "t0k", "-strategies", "guard", "-requests", "50", "-items", "1", "-stock", "10", "-work", "0s"}
	var out, errb bytes.Buffer
	assert.Equal(t, ExitThreshold, Main(context.Background(), append(args, "-threshold", "p99<1us"), &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "a -threshold was missed")
	assert.Contains(t, out.String(), "MISSED")
	out.Reset()
	errb.Reset()
	assert.Equal(t, 0, Main(context.Background(), append(args, "-threshold", "p99<1m,errors<=100%"), &out, &errb), errb.String())
	assert.NotContains(t, out.String(), "MISSED")
}
