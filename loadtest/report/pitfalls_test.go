package report

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/internal/verdict"
)

// The exit status of -scenario pitfalls: 1 as soon as one row did not show what it should (a
// pitfall that did not fail, a fix that broke an invariant), with the row marked.
func TestWritePitfallsExitStatus(t *testing.T) {
	ok := PitfallRow{Case: "fixed-lease", Strategy: "fixed-lease", Role: "pitfall", Expected: verdict.Oversold, Verdict: verdict.Oversold, OK: true, Lesson: "l"}
	fix := PitfallRow{Case: "fixed-lease", Strategy: "lock+guard", Role: "fix", Expected: verdict.Safe, Verdict: verdict.Safe, OK: true, Lesson: "l"}
	var out strings.Builder
	assert.Equal(t, 0, WritePitfalls(&out, []PitfallRow{ok, fix}))
	assert.NotContains(t, out.String(), "UNEXPECTED")

	missed := ok
	missed.Verdict, missed.OK = verdict.Safe, false // the pitfall did not show its failure
	out.Reset()
	assert.Equal(t, 1, WritePitfalls(&out, []PitfallRow{missed, fix}))
	assert.Contains(t, out.String(), "SAFE  <- UNEXPECTED")

	broken := fix
	broken.Verdict, broken.OK = verdict.Oversold, false // the fix broke an invariant
	out.Reset()
	assert.Equal(t, 1, WritePitfalls(&out, []PitfallRow{ok, broken}))
}
