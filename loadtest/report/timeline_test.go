package report

import (
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stretchr/testify/assert"
)

// TestMixStrip: the HTML strip has a row per kind with its count, a bar per fault that began
// (hollow when cut short), the missed kinds marked, every text escaped.
func TestMixStrip(t *testing.T) {
	ev := &fault.Event{Mode: fault.ChaosMix, Mix: &fault.MixSchedule{
		Kinds: []string{"pause", "kill", "clock"}, Fired: map[string]int{"pause": 1, "kill": 1}, Missed: []string{"clock"},
		Faults: []fault.MixFault{
			{Kind: "pause", At: 1, End: 2.5, What: "pause: <instance 0>", Outcome: "fired"},
			{Kind: "kill", At: 3, End: 3.4, What: "kill: instance 1", Outcome: "fired"},
			{Kind: "pause", At: 9, End: 9.5, What: "pause: instance 2", Outcome: fault.ErrCutShort.Error()},
		}}}
	svg := string(mixStrip(ev, 10))
	assert.Equal(t, 3, strings.Count(svg, "<rect"))
	assert.Contains(t, svg, "pause ×1")
	assert.Contains(t, svg, "clock ×0 MISSED")
	assert.Contains(t, svg, "&lt;instance 0&gt;")
	assert.NotContains(t, svg, "<instance 0>")
	assert.Contains(t, svg, `fill="none"`, "the fault cut short is hollow")
	assert.Empty(t, mixStrip(&fault.Event{Mode: fault.ChaosPause}, 10))
}
