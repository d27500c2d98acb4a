package fault

import (
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Lanes is the hot item's lock over a -chaos pause run, as the instances told it on their
// event streams (recording.go): one row per instance, each hold of the item's lock a bar from
// its acquisition to its release (or to its last write, when its holder learned of the loss),
// its lease's end, its writes, and the pause. Times are seconds since the run began, on the one
// clock of the machine (Clock says how far off they can be). The report draws it
// (report/lanes.go); the lab draws the same from the same events (lab/web/timeline.js).
type Lanes struct {
	Item     int64     `json:"item"`
	From     float64   `json:"from_s"` // the drawing's window: around the pause, else the whole run
	To       float64   `json:"to_s"`
	LeaseMS  float64   `json:"lease_ms"`
	Rows     []LaneRow `json:"rows"`
	Pause    *LaneSpan `json:"pause,omitempty"` // the SIGSTOP, on its instance's row
	Overlaps []Overlap `json:"overlaps,omitempty"`
	Missed   int64     `json:"missed,omitempty"` // events the streams missed (a subscriber 256 events behind)
	Notes    []string  `json:"notes,omitempty"`  // a stream that failed, holds begun before the recording
	Clock    string    `json:"clock"`
	Events   int       `json:"events"` // the hot item's lock events recorded
}

// LaneRow is one instance's holds of the item's lock.
type LaneRow struct {
	Instance int        `json:"instance"`
	PID      int        `json:"pid"`
	Holds    []LaneHold `json:"holds"`
}

// LaneHold is one hold of the lock: From its acquisition (or the recording's start, Before) To
// its release, or, once its holder learned of the loss (Lost), to its last write; To is the
// end of the recording when neither came (Open).
type LaneHold struct {
	Token    int64       `json:"token"`
	From     float64     `json:"from_s"`
	To       float64     `json:"to_s"`
	LeaseEnd float64     `json:"lease_end_s"` // the last renewal (or the acquisition) plus the lease
	Renewals []float64   `json:"renewals,omitempty"`
	Lost     float64     `json:"lost_s,omitempty"` // when the holder learned its lock was gone (0: never)
	Before   bool        `json:"before,omitempty"` // acquired before the recording began
	Open     bool        `json:"open,omitempty"`   // neither released nor lost by the recording's end
	Writes   []LaneWrite `json:"writes,omitempty"`
}

// LaneWrite is one write its hold's token carried: accepted (within the lease), accepted late
// (after the lease's end: nothing refused it) or refused (the fence: the database had Seen a
// newer token).
type LaneWrite struct {
	At      float64 `json:"at_s"`
	Outcome string  `json:"outcome"`
	Seen    int64   `json:"seen,omitempty"`
}

// LaneSpan is a span of one instance's row.
type LaneSpan struct {
	Instance int     `json:"instance"`
	From     float64 `json:"from_s"`
	To       float64 `json:"to_s"`
}

// Overlap is the time the holder of LateToken on instance Late worked past its lease's end
// while instance Holder held the lock of the same item (Holds holds, tokens HolderToken to
// LastToken): the two holders the lesson is about. From and To bound it; For is the time both
// held (the sum over Holder's holds).
type Overlap struct {
	Late        int     `json:"late_instance"`
	LateToken   int64   `json:"late_token"`
	Holder      int     `json:"holder_instance"`
	HolderToken int64   `json:"holder_token"`
	LastToken   int64   `json:"last_token"`
	Holds       int     `json:"holds"`
	From        float64 `json:"from_s"`
	To          float64 `json:"to_s"`
	For         float64 `json:"for_s"`
}

// LaneMark is a write of the drawing with its row.
type LaneMark struct {
	Instance int
	Token    int64
	LaneWrite
}

// Write outcomes.
const (
	WriteAccepted = "accepted"
	WriteLate     = "accepted late"
	WriteRefused  = "refused"
)

// minOverlap: an overlap shorter than this (a release stamped just after the next acquire) is
// not counted (docs/DESIGN.md §5.5).
const minOverlap = 0.010

// laneClock says how far the times of different processes can be off on the one axis.
const laneClock = "every instance and the load test run on this machine and stamp with its one system clock (Unix ms): " +
	"their times are put on one axis as they are. An acquisition or renewal is stamped after Redis answered, up to one " +
	"Redis round trip late (under a millisecond on loopback, tens of ms on a loaded machine), and so is the lease end drawn " +
	"from it; the SIGSTOP and SIGCONT are stamped by the load test around its kill(2) calls, the stop taking effect within " +
	"a scheduling quantum (a few ms). Overlaps under 10 ms are not counted."

// InstanceEvent is one event of instance Instance's stream.
type InstanceEvent struct {
	Instance int
	client.LabEvent
}

// BuildLanes builds the hot item's lanes from the recorded events of instances (pids: each
// one's process id, from its stream's hello), start the run's beginning, end the recording's
// end, and ev the run's pause (nil or not Paused: no pause span, the whole run drawn).
func BuildLanes(item int64, events []InstanceEvent, pids []int, start, end time.Time, ev *Event) *Lanes {
	at := func(unixMS float64) float64 { return (unixMS - float64(start.UnixNano())/1e6) / 1000 }
	l := &Lanes{Item: item, To: end.Sub(start).Seconds(), Clock: laneClock, Events: len(events)}
	rows := make([]LaneRow, len(pids))
	for i, pid := range pids {
		rows[i] = LaneRow{Instance: i, PID: pid}
	}
	ordered := slices.Clone(events)
	slices.SortStableFunc(ordered, func(a, b InstanceEvent) int {
		if a.Instance != b.Instance {
			return a.Instance - b.Instance
		}
		return int(a.Seq - b.Seq)
	})
	before := 0
	for _, e := range ordered {
		if e.Instance < 0 || e.Instance >= len(rows) {
			continue
		}
		row := &rows[e.Instance]
		t := at(e.T)
		if e.LeaseMS > 0 {
			l.LeaseMS = e.LeaseMS
		}
		find := func(token int64) *LaneHold {
			for i := len(row.Holds) - 1; i >= 0; i-- {
				if row.Holds[i].Token == token {
					return &row.Holds[i]
				}
			}
			if token == 0 {
				return nil
			}
			before++
			row.Holds = append(row.Holds, LaneHold{Token: token, Before: true, Open: true, LeaseEnd: -1})
			return &row.Holds[len(row.Holds)-1]
		}
		switch e.Kind {
		case "acquire":
			if n := len(row.Holds); n > 0 && row.Holds[n-1].Token == e.Token {
				continue // a re-entry tells the same token again
			}
			row.Holds = append(row.Holds, LaneHold{Token: e.Token, From: t, To: t, LeaseEnd: t + e.LeaseMS/1000, Open: true})
		case "renew":
			if h := find(e.Token); h != nil {
				h.Renewals = append(h.Renewals, t)
				h.LeaseEnd = t + e.LeaseMS/1000
			}
		case "release":
			if h := find(e.Token); h != nil && h.Lost == 0 {
				h.To, h.Open = t, false
			}
		case "lost":
			if h := find(e.Token); h != nil {
				h.Lost, h.To, h.Open = t, max(h.To, t), false
			}
		case "order", "fence_refused":
			h := find(e.Token)
			if h == nil {
				continue
			}
			w := LaneWrite{At: t, Outcome: WriteAccepted}
			switch {
			case e.Kind == "fence_refused":
				w.Outcome, w.Seen = WriteRefused, e.Seen
			case h.LeaseEnd >= 0 && t > h.LeaseEnd:
				w.Outcome = WriteLate
			}
			h.Writes = append(h.Writes, w)
			h.To = max(h.To, t)
		}
	}
	for i := range rows {
		for k := range rows[i].Holds {
			if h := &rows[i].Holds[k]; h.Open {
				h.To = l.To
			}
		}
	}
	if before > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("%d hold(s) began before the recording: drawn from its start", before))
	}
	l.window(rows, ev)
	var paused int64
	if ev != nil && ev.Paused {
		paused = ev.Token
	}
	l.overlaps(paused)
	return l
}

// window keeps what the drawing shows: with a pause, from a little before the paused hold (or
// the pause) to a little after the resumed holder's last step; else the whole recording.
func (l *Lanes) window(rows []LaneRow, ev *Event) {
	if ev != nil && ev.Paused {
		l.Pause = &LaneSpan{Instance: ev.Instance, From: ev.PausedAt, To: ev.ResumedAt}
		from, to := ev.PausedAt, ev.ResumedAt
		if ev.Instance >= 0 && ev.Instance < len(rows) {
			for _, h := range rows[ev.Instance].Holds {
				if h.Token == ev.Token && ev.Token > 0 {
					if !h.Before {
						from = min(from, h.From)
					}
					if !h.Open {
						to = max(to, h.To)
					}
				}
			}
		}
		l.From, l.To = max(0, from-0.2), min(l.To, to+0.3)
	}
	for i := range rows {
		var kept []LaneHold
		for _, h := range rows[i].Holds {
			if h.To < l.From || (!h.Before && h.From > l.To) {
				continue
			}
			if h.Before {
				h.From = l.From
			}
			kept = append(kept, h)
		}
		rows[i].Holds = kept
	}
	l.Rows = rows
}

// overlaps finds, for every hold past its lease's end, the later holds of the lock that ran
// meanwhile (on any instance). A hold whose end the streams never told (Open: drawn to the end
// of the recording) is taken for one past its lease only when it is the paused holder's (token
// paused): another one's missing release is more likely an event a lagging stream missed than
// a second holder.
func (l *Lanes) overlaps(paused int64) {
	type ref struct {
		row int
		h   LaneHold
	}
	var all []ref
	for _, r := range l.Rows {
		for _, h := range r.Holds {
			all = append(all, ref{r.Instance, h})
		}
	}
	for _, a := range all {
		if a.h.LeaseEnd < 0 || a.h.To <= a.h.LeaseEnd || (a.h.Open && a.h.Token != paused) {
			continue
		}
		byRow := map[int]*Overlap{}
		for _, b := range all {
			if b.h.Token <= a.h.Token {
				continue
			}
			from, to := max(a.h.LeaseEnd, b.h.From), min(a.h.To, b.h.To)
			if to-from < minOverlap {
				continue
			}
			o := byRow[b.row]
			if o == nil {
				o = &Overlap{Late: a.row, LateToken: a.h.Token, Holder: b.row, HolderToken: b.h.Token, From: from, To: to}
				byRow[b.row] = o
			}
			o.HolderToken, o.LastToken = min(o.HolderToken, b.h.Token), max(o.LastToken, b.h.Token)
			o.From, o.To, o.For, o.Holds = min(o.From, from), max(o.To, to), o.For+to-from, o.Holds+1
		}
		for _, o := range byRow {
			l.Overlaps = append(l.Overlaps, *o)
		}
	}
	slices.SortFunc(l.Overlaps, func(a, b Overlap) int {
		if a.From != b.From {
			if a.From < b.From {
				return -1
			}
			return 1
		}
		return a.Holder - b.Holder
	})
}

// Marks returns the writes of the drawing that were not accepted within their lease (refused
// by the fence, or accepted late), in time order.
func (l *Lanes) Marks() []LaneMark {
	var out []LaneMark
	for _, r := range l.Rows {
		for _, h := range r.Holds {
			for _, w := range h.Writes {
				if w.Outcome != WriteAccepted && w.At >= l.From && w.At <= l.To {
					out = append(out, LaneMark{Instance: r.Instance, Token: h.Token, LaneWrite: w})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b LaneMark) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return out
}
