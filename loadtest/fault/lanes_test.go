package fault

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/client"
)

// pauseEvents is a pause run's hot lock as three instances' streams tell it: i0 takes token 1,
// writes once within its lease and once after it, is stopped, and on resume its write is
// refused by the fence and it learns of the loss; i1 holds tokens 2 and 3 meanwhile; i2 writes
// with token 4, acquired before the recording.
func pauseEvents(start time.Time) []InstanceEvent {
	ms := func(s float64) float64 { return float64(start.UnixNano())/1e6 + s*1000 }
	ev := func(instance int, seq int64, kind string, at float64, token int64) InstanceEvent {
		return InstanceEvent{Instance: instance, LabEvent: client.LabEvent{Seq: seq, T: ms(at), Kind: kind, Item: 9, Token: token}}
	}
	acquire := ev(0, 1, "acquire", 0.1, 1)
	acquire.LeaseMS = 500
	refused := ev(0, 6, "fence_refused", 1.66, 1)
	refused.Seen = 3
	a2, a3 := ev(1, 1, "acquire", 0.7, 2), ev(1, 4, "acquire", 0.8, 3)
	a2.LeaseMS, a3.LeaseMS = 500, 500
	return []InstanceEvent{
		refused, acquire, // out of order: sorted by instance and seq
		ev(0, 2, "order", 0.3, 1), ev(0, 3, "order", 0.65, 1),
		ev(0, 7, "lost", 1.67, 1), ev(0, 8, "release", 1.68, 1),
		a2, ev(1, 2, "order", 0.72, 2), ev(1, 3, "release", 0.75, 2),
		a3, ev(1, 5, "release", 0.9, 3),
		ev(2, 1, "order", 1.2, 4),
	}
}

func TestBuildLanes(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pause := &Event{Mode: ChaosPause, Paused: true, Instance: 0, Token: 1, PausedAt: 0.15, ResumedAt: 1.65}
	l := BuildLanes(9, pauseEvents(start), []int{100, 101, 102}, start, start.Add(3*time.Second), pause)

	assert.InDelta(t, 0, l.From, 1e-9, "the window starts 0.2 s before the paused hold, at most at the run's start")
	assert.InDelta(t, 1.97, l.To, 1e-6, "and ends 0.3 s after the resumed holder's last step (its loss)")
	assert.Equal(t, 500.0, l.LeaseMS)
	require.Len(t, l.Rows, 3)
	assert.Equal(t, 101, l.Rows[1].PID)
	require.Len(t, l.Rows[0].Holds, 1)
	h := l.Rows[0].Holds[0]
	assert.Equal(t, int64(1), h.Token)
	assert.InDelta(t, 0.1, h.From, 1e-6)
	assert.InDelta(t, 0.6, h.LeaseEnd, 1e-6)
	assert.InDelta(t, 1.67, h.To, 1e-6, "a lost hold ends at its loss (its release after it finds it lost)")
	assert.InDelta(t, 1.67, h.Lost, 1e-6)
	require.Len(t, h.Writes, 3)
	assert.Equal(t, []string{WriteAccepted, WriteLate, WriteRefused}, []string{h.Writes[0].Outcome, h.Writes[1].Outcome, h.Writes[2].Outcome})
	assert.Equal(t, int64(3), h.Writes[2].Seen)
	require.Len(t, l.Rows[1].Holds, 2)
	require.Len(t, l.Rows[2].Holds, 1)
	assert.True(t, l.Rows[2].Holds[0].Before, "token 4 was acquired before the recording")
	assert.True(t, l.Rows[2].Holds[0].Open)
	assert.InDelta(t, 3, l.Rows[2].Holds[0].To, 1e-6, "an open hold runs to the recording's end (the drawing clips it)")
	assert.NotEmpty(t, l.Notes)
	require.NotNil(t, l.Pause)
	assert.Equal(t, LaneSpan{Instance: 0, From: 0.15, To: 1.65}, *l.Pause)

	// i0 past its lease (0.6 s) while i1 held tokens 2 (0.7-0.75) and 3 (0.8-0.9), and i2 token 4.
	require.Len(t, l.Overlaps, 2, "%+v", l.Overlaps)
	assert.Equal(t, 2, l.Overlaps[0].Holder, "sorted by start: token 4's hold ran from before the recording")
	assert.InDelta(t, 0.6, l.Overlaps[0].From, 1e-6, "from i0's lease end")
	o := l.Overlaps[1]
	assert.Equal(t, Overlap{Late: 0, LateToken: 1, Holder: 1, HolderToken: 2, LastToken: 3, Holds: 2, From: o.From, To: o.To, For: o.For}, o)
	assert.InDelta(t, 0.7, o.From, 1e-6)
	assert.InDelta(t, 0.9, o.To, 1e-6)
	assert.InDelta(t, 0.15, o.For, 1e-6)

	marks := l.Marks()
	require.Len(t, marks, 2)
	assert.Equal(t, WriteLate, marks[0].Outcome)
	assert.Equal(t, WriteRefused, marks[1].Outcome)
	assert.Equal(t, 0, marks[1].Instance)
}

// TestBuildLanesNoPause: without a pause the whole recording is drawn, and a hold released
// within its lease overlaps nothing.
func TestBuildLanesNoPause(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	events := pauseEvents(start)[6:11] // i1's two holds
	l := BuildLanes(9, events, []int{100, 101}, start, start.Add(2*time.Second), nil)
	assert.InDelta(t, 0, l.From, 1e-9)
	assert.InDelta(t, 2, l.To, 1e-9)
	assert.Nil(t, l.Pause)
	assert.Empty(t, l.Overlaps)
	assert.Len(t, l.Rows[1].Holds, 2)
	assert.Empty(t, l.Marks())
}

// TestBuildLanesOpenHoldIsNoSecondHolder: a hold whose release the streams never told (a
// lagging stream missed it) is drawn to the recording's end, but is not taken for a holder past
// its lease beside the next one: only the paused holder's open hold is.
func TestBuildLanesOpenHoldIsNoSecondHolder(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := func(s float64) float64 { return float64(start.UnixNano())/1e6 + s*1000 }
	ev := func(instance int, seq int64, kind string, at float64, token int64) InstanceEvent {
		e := InstanceEvent{Instance: instance, LabEvent: client.LabEvent{Seq: seq, T: ms(at), Kind: kind, Item: 9, Token: token}}
		if kind == "acquire" {
			e.LeaseMS = 500
		}
		return e
	}
	events := []InstanceEvent{
		ev(0, 1, "acquire", 0.1, 5), // its release was missed
		ev(1, 1, "acquire", 1.0, 6), ev(1, 2, "release", 1.2, 6),
	}
	l := BuildLanes(9, events, []int{100, 101}, start, start.Add(2*time.Second), nil)
	require.Len(t, l.Rows[0].Holds, 1)
	assert.True(t, l.Rows[0].Holds[0].Open)
	assert.Empty(t, l.Overlaps, "a missed release is no overlap")

	paused := &Event{Mode: ChaosPause, Paused: true, Instance: 0, Token: 5, PausedAt: 0.2, ResumedAt: 1.9}
	l = BuildLanes(9, events, []int{100, 101}, start, start.Add(2*time.Second), paused)
	assert.Len(t, l.Overlaps, 1, "the paused holder, still stopped, past its lease beside the next holder")
}
