package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPitfallsScenario runs -scenario pitfalls end to end (real storefront processes, a real
// redis-server restarted from its snapshot): every pitfall shows its failure and every fix
// holds, in the order of the table.
func TestPitfallsScenario(t *testing.T) {
	needStorefront(t)
	_, err := exec.LookPath("redis-server")
	require.NoError(t, err, "the scenario restarts a real redis-server from its snapshot (make test installs it)")
	cfg := Config{Bin: storefrontBin, Instances: 3, Timeout: 10 * time.Second, Quiet: true}
	rows, err := RunPitfalls(t.Context(), cfg, tlog{t})
	require.NoError(t, err)
	want := []struct{ strategy, verdict string }{
		{"setnx-expire", "BLOCKED"}, {"lock", VerdictSafe},
		{"del-release", VerdictOversold}, {"fixed-lease", VerdictSafe},
		{"fixed-lease", VerdictOversold}, {"lock", VerdictSafe}, {"lock+guard", VerdictSafe},
		{"optimistic", VerdictSafe},
		{"redis-stock", VerdictOversold}, {"watch", VerdictOversold}, {"redis-stock+guard", VerdictSafe},
	}
	require.Len(t, rows, len(want))
	for i, w := range want {
		assert.Equal(t, w.strategy, rows[i].Strategy, "row %d", i)
		assert.Equal(t, w.verdict, rows[i].Verdict, "row %d (%s, %s): %s", i, rows[i].Case, rows[i].Strategy, rows[i].Detail)
		assert.True(t, rows[i].OK, "row %d", i)
		assert.NotEmpty(t, rows[i].Lesson)
	}
	assert.Contains(t, rows[0].Detail, "deleted by the scenario afterwards", "the no-TTL key is not left behind")
	assert.Equal(t, 0, writePitfalls(tlog{t}, rows))
}

// The exit status of -scenario pitfalls: 1 as soon as one row did not show what it should (a
// pitfall that did not fail, a fix that broke an invariant), with the row marked.
func TestWritePitfallsExitStatus(t *testing.T) {
	ok := pitfallRow{Case: "fixed-lease", Strategy: "fixed-lease", Role: "pitfall", Verdict: VerdictOversold, OK: true, Lesson: "l"}
	fix := pitfallRow{Case: "fixed-lease", Strategy: "lock+guard", Role: "fix", Verdict: VerdictSafe, OK: true, Lesson: "l"}
	var out strings.Builder
	assert.Equal(t, 0, writePitfalls(&out, []pitfallRow{ok, fix}))
	assert.NotContains(t, out.String(), "UNEXPECTED")

	missed := ok
	missed.Verdict, missed.OK = VerdictSafe, false // the pitfall did not show its failure
	out.Reset()
	assert.Equal(t, 1, writePitfalls(&out, []pitfallRow{missed, fix}))
	assert.Contains(t, out.String(), "SAFE  <- UNEXPECTED")

	broken := fix
	broken.Verdict, broken.OK = VerdictOversold, false // the fix broke an invariant
	out.Reset()
	assert.Equal(t, 1, writePitfalls(&out, []pitfallRow{ok, broken}))
	assert.Equal(t, "BLOCKED", (&pitfallRow{Case: "setnx-expire", Role: "pitfall"}).expected())
}
