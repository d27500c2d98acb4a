package scenario

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
)

// TestHistoryNaiveNotLinearizable runs naive and guard over two processes with reads mixed in:
// the checker must find naive's history NOT linearizable (and draw it next to the report) and
// guard's linearizable, and the run passes (naive is not expected safe).
func TestHistoryNaiveNotLinearizable(t *testing.T) {
	testkit.NeedStorefront(t)
	dir := t.TempDir()
	cfg := smallRun("naive", "guard")
	cfg.Instances, cfg.Requests, cfg.Reads, cfg.CheckTimeout = 2, 200, 0.2, checks.DefaultCheckTimeout
	cfg.HTMLFile = filepath.Join(dir, "report.html")
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	res := byStrategy(t, rep)

	naive := res["naive"].History
	require.NotNil(t, naive)
	assert.Equal(t, checks.NotLinearizable, naive.Verdict, naive.Reason)
	assert.False(t, naive.Failed, "naive is not expected linearizable")
	assert.Positive(t, naive.Reads)
	assert.Equal(t, res["naive"].Reads, naive.Reads)
	var viz string
	for _, it := range naive.Items {
		if it.Result == "illegal" {
			viz = it.Visualization
		}
	}
	require.NotEmpty(t, viz, "a visualization of the violation")
	assert.Equal(t, dir, filepath.Dir(viz), "next to the report")
	_, err = os.Stat(viz)
	require.NoError(t, err)

	guard := res["guard"].History
	require.NotNil(t, guard)
	assert.Equal(t, checks.Linearizable, guard.Verdict, guard.Reason)
	assert.Equal(t, 0, rep.ExitCode)

	var table bytes.Buffer
	rep.WriteTable(&table)
	assert.Contains(t, table.String(), "naive          NOT linearizable (expected)")
	assert.Contains(t, table.String(), "guard          linearizable")
	require.NoError(t, rep.WriteHTML(cfg.HTMLFile))
	page, err := os.ReadFile(cfg.HTMLFile)
	require.NoError(t, err)
	assert.Contains(t, string(page), `<a href="`+filepath.Base(viz)+`">visualization</a>`)
	assert.True(t, strings.Count(string(page), "NOT linearizable") >= 1)
}

// TestHistoryLockGuardRefusalsTellTheTruth runs lock+guard where some buyers leave (a client
// timeout just above the work) while their purchases are admitted in a coalesced batch: a
// sold-out or insufficient-stock answer must still be true when it is given. It fails while
// the coalescing answers refusals from the stock minus the units admitted to a batch that has
// not committed (and may never commit them: a member whose buyer left is not written).
func TestHistoryLockGuardRefusalsTellTheTruth(t *testing.T) {
	testkit.NeedStorefront(t)
	cfg := smallRun("lock+guard")
	cfg.Instances, cfg.Stock, cfg.Requests, cfg.Concurrency, cfg.Retry = 2, 20, 600, 32, 0
	cfg.Work, cfg.Timeout, cfg.Reads, cfg.CheckTimeout = 100*time.Millisecond, 150*time.Millisecond, 0.2, checks.DefaultCheckTimeout
	cfg.JSONFile = filepath.Join(t.TempDir(), "report.json")
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	h := byStrategy(t, rep)["lock+guard"].History
	require.NotNil(t, h)
	assert.Equal(t, checks.Linearizable, h.Verdict, "%s (visualization: %v)", h.Reason, h.Items)
}

// TestFakeFalseRefusalsFailSafeStrategy: a server whose invariants hold but that answers sold
// out while units remain (every 5th purchase) is caught by the checked history alone: the safe
// strategy's run fails with exit 1, the verdict column says why.
func TestFakeFalseRefusalsFailSafeStrategy(t *testing.T) {
	f, srv := testkit.NewFake(t, true)
	f.Liar = true
	cfg := fakeConfig("guard")
	cfg.Items, cfg.Stock, cfg.Requests, cfg.Reads, cfg.CheckTimeout = 1, 100, 60, 0.2, checks.DefaultCheckTimeout
	cfg.JSONFile = filepath.Join(t.TempDir(), "r.json")
	rep, err := RunTargets(context.Background(), cfg, []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Equal(t, verdict.Safe, g.Verdict, "the invariants hold: a refusal writes nothing")
	require.NotNil(t, g.History)
	assert.Equal(t, checks.NotLinearizable, g.History.Verdict, g.History.Reason)
	assert.True(t, g.History.Failed && g.Failed)
	assert.Equal(t, 1, rep.ExitCode)
	assert.Equal(t, []string{"guard"}, rep.Failed)
	var out bytes.Buffer
	rep.WriteTable(&out)
	assert.Contains(t, out.String(), "SAFE (FAIL: history NOT linearizable)")

	f.Liar = false
	rep, err = RunTargets(context.Background(), cfg, []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, checks.Linearizable, rep.Strategies[0].History.Verdict, rep.Strategies[0].History.Reason)
	assert.Positive(t, rep.Strategies[0].History.Reads)
	assert.Equal(t, 0, rep.ExitCode)
}
