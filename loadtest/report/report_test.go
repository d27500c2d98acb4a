package report

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/fault"
)

// TestMissedScheduleReported: a run whose schedule missed a kind is failed as such in the
// table and the HTML report, not as a strategy that broke an invariant.
func TestMissedScheduleReported(t *testing.T) {
	miss := "the fault schedule missed clock: the run ended before every kind fired (give a longer -duration or a shorter -mix-gap)"
	rep := &Report{Mode: "self-contained", Config: ReportConfig{Chaos: fault.ChaosMix}, Failed: []string{"guard"}, ExitCode: 1,
		Strategies: []StrategyResult{{Strategy: "guard", Verdict: verdict.Safe, ExpectedSafe: true, Failed: true,
			Findings: verdict.Findings{Violations: []string{miss}}}}}
	var out bytes.Buffer
	rep.WriteTable(&out)
	assert.Contains(t, out.String(), "SAFE (FAIL: see below)")
	assert.Contains(t, out.String(), "guard: "+miss)
	assert.NotContains(t, out.String(), "called safe")
	file := filepath.Join(t.TempDir(), "r.html")
	require.NoError(t, rep.WriteHTML(file))
	page, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(page), "SAFE (failed: see below)")
	assert.Contains(t, string(page), "guard failed:")
	assert.NotContains(t, string(page), "called safe")
}
