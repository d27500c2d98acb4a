package report

import (
	"testing"

	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestThresholdsHold(t *testing.T) {
	s := StrategyResult{Strategy: "guard", Sends: 200, ReqPerSec: 450, Latency: Latency{P99: 180, Max: 250}}
	s.ErrorsByCode = map[string]int{"timeout": 1, "lock_timeout": 2}
	var ts config.ThresholdList
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
