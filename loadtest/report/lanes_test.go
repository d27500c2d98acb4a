package report

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/fault"
)

// pausedLanes: i0 holds token 7 past its lease, stopped meanwhile, its write refused on
// resume; i1 holds token 8 in between.
func pausedLanes() *fault.Event {
	return &fault.Event{Mode: fault.ChaosPause, Paused: true, Instance: 0, Token: 7, PausedAt: 0.2, ResumedAt: 1.7,
		Lanes: &fault.Lanes{Item: 3, From: 0, To: 2, LeaseMS: 500, Clock: "one clock <&>",
			Rows: []fault.LaneRow{
				{Instance: 0, PID: 10, Holds: []fault.LaneHold{{Token: 7, From: 0.1, To: 1.72, LeaseEnd: 0.6, Lost: 1.72,
					Writes: []fault.LaneWrite{{At: 1.71, Outcome: fault.WriteRefused, Seen: 8}, {At: 1.716, Outcome: fault.WriteRefused, Seen: 8}}}}},
				{Instance: 1, PID: 11, Holds: []fault.LaneHold{{Token: 8, From: 0.62, To: 0.9, LeaseEnd: 1.12, Renewals: []float64{0.8},
					Writes: []fault.LaneWrite{{At: 0.85, Outcome: fault.WriteAccepted}}}}},
			},
			Pause:    &fault.LaneSpan{Instance: 0, From: 0.2, To: 1.7},
			Overlaps: []fault.Overlap{{Late: 0, LateToken: 7, Holder: 1, HolderToken: 8, LastToken: 8, Holds: 1, From: 0.62, To: 0.9, For: 0.28}},
		}}
}

func TestLaneStrip(t *testing.T) {
	assert.Empty(t, laneStrip(nil))
	assert.Empty(t, laneStrip(&fault.Event{}))
	out := string(laneStrip(pausedLanes()))

	from := strings.Index(out, "<svg")
	to := strings.Index(out, "</svg>") + len("</svg>")
	require.Positive(t, from)
	dec := xml.NewDecoder(strings.NewReader(out[from:to]))
	classes := map[string][]map[string]string{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the SVG is well-formed")
		if se, ok := tok.(xml.StartElement); ok {
			attr := map[string]string{}
			for _, a := range se.Attr {
				attr[a.Name.Local] = a.Value
			}
			for _, c := range strings.Fields(attr["class"]) {
				classes[c] = append(classes[c], attr)
			}
		}
	}
	require.Len(t, classes["hold"], 2)
	assert.Equal(t, "0", classes["hold"][0]["data-instance"])
	assert.Equal(t, "7", classes["hold"][0]["data-token"])
	assert.Len(t, classes["hold-late"], 1, "token 7 hatched past its lease")
	assert.Len(t, classes["lease-end"], 1, "only the lease a hold outlived is drawn")
	assert.Len(t, classes["renew"], 1)
	assert.Len(t, classes["lost"], 1)
	require.Len(t, classes["pause"], 1)
	assert.Equal(t, "0", classes["pause"][0]["data-instance"])
	require.Len(t, classes["refused"], 2)
	assert.Equal(t, "7", classes["refused"][0]["data-token"])
	assert.Len(t, classes["accepted"], 1)
	assert.Len(t, classes["overlap"], 2, "outlined on both rows")

	for _, words := range []string{
		"i0 stopped (SIGSTOP) from +0.20 s to +1.70 s, holding token 7",
		"i0 still working (token 7), i1 holding item 3 (token 8), for 0.28 s between +0.62 s and +0.90 s",
		"i0&#39;s 2 writes with token 7 (one hold&#39;s buyers) at +1.71 s to +1.72 s: refused by the fence (the database had seen token 8)",
		"one clock &lt;&amp;&gt;",
		"write refused by the fence", "still working, lock gone",
	} {
		assert.Contains(t, out, words)
	}
	assert.Contains(t, out, `aria-hidden="true"`, "the words, not the drawing, are read out")
}

func TestLaneSummary(t *testing.T) {
	assert.Empty(t, laneSummary(&fault.Event{}))
	ev := pausedLanes()
	ev.Lanes.Events = 12
	ev.Lanes.Rows[0].Holds[0].Writes[1].Outcome = fault.WriteLate
	assert.Equal(t, "12 events of item 3's lock from the instances' streams; i0 still working (token 7) while i1 held the item for 0.28 s; "+
		"1 write(s) of token 7 refused; 1 write(s) of token 7 accepted late (the HTML report draws them)", laneSummary(ev))
}
