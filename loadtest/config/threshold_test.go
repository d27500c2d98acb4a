package config

import (
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
		"gap<2s":      {Expr: "gap<2s", Metric: "gap", Op: "<", Bound: 2000},
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
