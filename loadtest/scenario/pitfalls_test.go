package scenario

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
)

// TestPitfallsScenario runs -scenario pitfalls end to end (real storefront processes, a real
// redis-server restarted from its snapshot): every pitfall shows its failure and every fix
// holds, in the order of the table.
func TestPitfallsScenario(t *testing.T) {
	testkit.NeedStorefront(t)
	_, err := exec.LookPath("redis-server")
	require.NoError(t, err, "the scenario restarts a real redis-server from its snapshot (make test installs it)")
	cfg := config.Config{Bin: testkit.Storefront, Instances: 3, Timeout: 10 * time.Second, Quiet: true}
	rows, err := RunPitfalls(t.Context(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	want := []struct{ strategy, verdict string }{
		{"setnx-expire", verdict.Blocked}, {"lock", verdict.Safe},
		{"del-release", verdict.Oversold}, {"fixed-lease", verdict.Safe},
		{"fixed-lease", verdict.Oversold}, {"lock", verdict.Safe}, {"lock+guard", verdict.Safe},
		{"optimistic", verdict.Safe},
		{"redis-stock", verdict.Oversold}, {"watch", verdict.Oversold}, {"redis-stock+guard", verdict.Safe},
		{"request-order", verdict.Blocked}, {"lock+guard", verdict.Safe},
		{"line-by-line", verdict.Oversold}, {"guard", verdict.Safe},
	}
	require.Len(t, rows, len(want))
	for i, w := range want {
		assert.Equal(t, w.strategy, rows[i].Strategy, "row %d", i)
		assert.Equal(t, w.verdict, rows[i].Verdict, "row %d (%s, %s): %s", i, rows[i].Case, rows[i].Strategy, rows[i].Detail)
		assert.True(t, rows[i].OK, "row %d", i)
		assert.NotEmpty(t, rows[i].Lesson)
	}
	assert.Contains(t, rows[0].Detail, "deleted by the scenario afterwards", "the no-TTL key is not left behind")
	// The cart rows: the crossed carts are both refused at the lock wait with nothing sold, and
	// both sell in the canonical order; the lines checked one at a time sell 2 of 1, merged
	// they are refused.
	carts := rows[len(rows)-4:]
	assert.Equal(t, map[string]int{"lock_timeout": 2}, carts[0].Answers, carts[0].Detail)
	assert.Equal(t, [2]int{0, 10}, [2]int{carts[0].Sold, carts[0].Initial})
	assert.Equal(t, map[string]int{"201": 2}, carts[1].Answers, carts[1].Detail)
	assert.Equal(t, [2]int{4, 10}, [2]int{carts[1].Sold, carts[1].Initial})
	assert.Equal(t, map[string]int{"201": 1}, carts[2].Answers, carts[2].Detail)
	assert.Equal(t, [2]int{2, 1}, [2]int{carts[2].Sold, carts[2].Initial})
	assert.Equal(t, map[string]int{"insufficient_stock": 1}, carts[3].Answers, carts[3].Detail)
	assert.Equal(t, [2]int{0, 1}, [2]int{carts[3].Sold, carts[3].Initial})
	assert.Equal(t, 0, report.WritePitfalls(testkit.Tlog{T: t}, rows))
}

// TestWritePitfallsExitStatus: the script expects each pitfall's failure and that every fix
// holds (the table's exit status: TestWritePitfallsExitStatus in package report).
func TestWritePitfallsExitStatus(t *testing.T) {
	assert.Equal(t, verdict.Blocked, scripted("setnx-expire")[0].Expected)
	for _, row := range pitfallScript {
		if row.Role == "fix" {
			assert.Equal(t, verdict.Safe, row.Expected, "%s %s: a fix holds", row.Case, row.Strategy)
		}
	}
}
