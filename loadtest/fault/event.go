package fault

import (
	"fmt"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Event reports the fault a chaos mode brought during one strategy's run (a pause of an
// instance, a failover, a cut, a hang, the fault schedule of -chaos mix) and its timeline.
type Event struct {
	Instance  int     `json:"instance"`           // index of the paused instance
	PID       int     `json:"pid"`                // its process id
	URL       string  `json:"url"`                // its base URL
	LockKey   string  `json:"lock_key,omitempty"` // the lock it held when paused
	Token     int64   `json:"token,omitempty"`    // the lock's fencing token
	Confirmed bool    `json:"confirmed"`          // Redis showed it still held the lock once stopped
	Attempts  int     `json:"attempts"`           // pauses tried (a holder that released in between is resumed and retried)
	PausedAt  float64 `json:"paused_at_s"`        // seconds since the strategy's run began
	ResumedAt float64 `json:"resumed_at_s"`       // seconds since the strategy's run began
	Note      string  `json:"note,omitempty"`     // what happened when no lock holder was paused
	Paused    bool    `json:"paused"`             // an instance was actually paused

	// -chaos failover and partition (failover.go, partition.go)
	Mode     string      `json:"mode"`                // pause, failover or partition
	FaultAt  float64     `json:"fault_at_s"`          // when selling could first be hurt: the pause, the master's death, the cut
	Timeline []Milestone `json:"timeline,omitempty"`  // what happened when
	NewToken int64       `json:"new_token,omitempty"` // token of the next holder of the hot lock, on another instance
	// partition: when the cut holder's own lock set dropped the lock (its watchdog declared
	// the loss) and when another instance first held it, both since the run began.
	LossAt float64 `json:"loss_declared_at_s,omitempty"`
	NextAt float64 `json:"next_holder_at_s,omitempty"`
	// After the run, from the answers and the order rows:
	ResumedAfter float64 `json:"selling_resumed_after_s"`      // from FaultAt to the first 201 of a purchase sent after it (-1: none)
	Refused      int     `json:"refused"`                      // answers after FaultAt that were neither 2xx nor sold out
	HolderWrote  string  `json:"holder_wrote,omitempty"`       // what the faulted holder's token wrote: "nothing", or when
	StaleRefused bool    `json:"stale_refused,omitempty"`      // failover: the stale holder's token has no order (the fence refused it, or it saw the loss)
	Baseline     float64 `json:"baseline_req_per_s,omitempty"` // latency: req/s of the same strategy without the latency

	Hang *HangFigures `json:"hang,omitempty"` // -chaos redis-hang and db-hang (hang.go)
	Mix  *MixSchedule `json:"mix,omitempty"`  // -chaos mix: the faults fired (mix.go)
	Kill *KillFigures `json:"kill,omitempty"` // -chaos kill: every kill and its sales gap (kill.go)
	// -chaos pause: the hot item's lock as the instances' event streams told it (lanes.go)
	Lanes *Lanes `json:"lanes,omitempty"`
}

// Milestone is one step of a fault, in seconds since the strategy's run began.
type Milestone struct {
	At   float64 `json:"at_s"`
	What string  `json:"what"`
}

// String describes the event in one line.
func (e *Event) String() string {
	if e.Hang != nil {
		return e.Hang.String()
	}
	if m, _ := ModeOf(e.Mode); m.Name != ChaosPause {
		return e.faultString(m)
	}
	if !e.Paused {
		return "no pause: " + e.Note
	}
	s := fmt.Sprintf("paused instance %d (pid %d, %s) at %.2fs, resumed at %.2fs", e.Instance, e.PID, e.URL, e.PausedAt, e.ResumedAt)
	if e.LockKey != "" {
		s += fmt.Sprintf(", holding lock %s token %d", e.LockKey, e.Token)
		if e.Confirmed {
			s += " (confirmed in Redis)"
		}
	}
	if e.Note != "" {
		s += "; " + e.Note
	}
	if e.ResumedAfter > 0 {
		s += fmt.Sprintf("; selling resumed %.2fs after the pause, %d purchase(s) refused meanwhile", e.ResumedAfter, e.Refused)
	}
	return s
}

// mark appends a milestone to ev's timeline.
func (ev *Event) mark(start time.Time, format string, a ...any) float64 {
	at := time.Since(start).Seconds()
	ev.Timeline = append(ev.Timeline, Milestone{At: at, What: fmt.Sprintf(format, a...)})
	return at
}

// Settle fills in what the answers and the order rows tell about the fault: how long after it
// selling resumed, how many purchases were refused meanwhile, what the faulted holder's
// token wrote and, for a failover, the next holder's token (hotID is the hot item).
func (ev *Event) Settle(start time.Time, purchases []*client.Purchase, orders []client.Order, instances int, hotID int64) {
	if ev == nil || ev.FaultAt == 0 {
		return
	}
	if ev.Kill != nil {
		ev.Kill.settle(start, purchases, instances, hotID)
	}
	mode, _ := ModeOf(ev.Mode)
	fault := start.Add(time.Duration(ev.FaultAt * float64(time.Second)))
	ev.ResumedAfter = -1
	first := time.Time{}
	for _, p := range purchases {
		for _, r := range p.Attempts {
			if r.Start.Before(fault) {
				continue
			}
			switch {
			case r.Status == 201:
				if end := r.Start.Add(r.Latency); first.IsZero() || end.Before(first) {
					first = end
				}
			case r.Status == 200, r.Code == "sold_out", r.Code == "insufficient_stock":
			default:
				ev.Refused++
			}
		}
	}
	if !first.IsZero() {
		ev.ResumedAfter = first.Sub(fault).Seconds()
	}
	if ev.Token == 0 {
		return
	}
	// The holder's own answers: attempt k of a purchase went to instance (Instance+k) mod n
	// (workload.execute). An order with the holder's token answered by another instance is
	// the next holder's twin token (the promoted replica issued the same number again).
	ev.HolderWrote = "nothing"
	mine := map[int64]bool{}     // orders of the holder's token answered by the holder
	byHolder := map[int64]bool{} // every order of the hot item the holder answered 201
	for _, p := range purchases {
		for k, r := range p.Attempts {
			if r.Status == 201 && r.Receipt.ItemID == hotID && (p.Instance+k)%instances == ev.Instance {
				byHolder[r.Receipt.OrderID] = true
				if r.Receipt.FenceToken == ev.Token {
					mine[r.Receipt.OrderID] = true
				}
			}
		}
	}
	if mode.tokensReissued && ev.NewToken > 0 {
		// The next holder is the first to lock the hot item on the promoted replica: the
		// lowest token another instance wrote the hot item with after the fault, when lower
		// than the one /api/debug/locks showed (a holder quicker than its polling is missed).
		// While the stale holder was stopped, no one else held the lock on the old master.
		for _, o := range orders {
			if o.ItemID == hotID && o.FenceToken > 0 && !byHolder[o.OrderID] && o.CreatedAt.After(fault) &&
				(ev.NewToken == 0 || o.FenceToken < ev.NewToken) {
				ev.NewToken = o.FenceToken
			}
		}
	}
	twin := false
	for _, o := range orders {
		if o.ItemID != hotID || o.FenceToken != ev.Token { // tokens count per item
			continue
		}
		if !mine[o.OrderID] {
			twin = true
			continue
		}
		at := o.CreatedAt.Sub(fault).Seconds()
		switch {
		case ev.LossAt > 0 && o.CreatedAt.After(start.Add(time.Duration(ev.LossAt*float64(time.Second)))):
			ev.HolderWrote = fmt.Sprintf("order %d, %.3fs after the fault, AFTER the loss was declared", o.OrderID, at)
		case mode.tokensReissued:
			// The failover's holder resumed and finished its purchase: the fence let its token
			// write once, as the newest the item had seen, whoever holds its twin.
			ev.HolderWrote = fmt.Sprintf("order %d, %.3fs after the fault: the holder resumed and finished its purchase, "+
				"and the fence accepted token %d once, as the newest the item had seen; it refuses any later write with "+
				"that token (the twin the promoted replica may issue) or an older one: the twin-token case working as "+
				"designed, safe, not an oversell", o.OrderID, at, ev.Token)
		default:
			ev.HolderWrote = fmt.Sprintf("order %d, %.3fs after the fault", o.OrderID, at)
		}
	}
	if twin && mode.tokensReissued {
		ev.HolderWrote += fmt.Sprintf(" (another instance wrote an order with the same token %d: a twin issued by the promoted replica)", ev.Token)
	}
}

// faultString describes the event of a fault other than a pause (of mode m).
func (e *Event) faultString(m Mode) string {
	var b strings.Builder
	if e.Kill != nil {
		b.WriteString("kill: " + e.Kill.String())
		if e.Note != "" {
			b.WriteString("; " + e.Note)
		}
	} else if e.Mode == ChaosMix {
		b.WriteString("mix")
		if e.Note != "" {
			b.WriteString(": " + e.Note)
		} else if e.ResumedAfter >= 0 {
			fmt.Fprintf(&b, ": selling resumed %.2fs after the first fault, %d purchase(s) refused during the run's faults", e.ResumedAfter, e.Refused)
		}
	} else if e.Token == 0 {
		b.WriteString("no fault: " + e.Note)
	} else {
		fmt.Fprintf(&b, "%s: holder instance %d (pid %d), token %d", e.Mode, e.Instance, e.PID, e.Token)
		if e.NewToken > 0 {
			fmt.Fprintf(&b, ", next holder's token %d", e.NewToken)
		}
		if m.watchesLoss {
			switch {
			case e.LossAt > 0 && (e.NextAt == 0 || e.LossAt <= e.NextAt):
				fmt.Fprintf(&b, "; loss declared %.3fs after the cut, next holder %s", e.LossAt-e.FaultAt, after(e.NextAt, e.FaultAt))
			case e.LossAt > 0:
				fmt.Fprintf(&b, "; LOSS DECLARED LATE: %.3fs after the cut, next holder already at %.3fs", e.LossAt-e.FaultAt, e.NextAt-e.FaultAt)
			default:
				b.WriteString("; the holder never dropped the lock")
			}
		}
		fmt.Fprintf(&b, "; holder's token wrote: %s", e.HolderWrote)
		if e.ResumedAfter >= 0 {
			fmt.Fprintf(&b, "; selling resumed %.2fs after the fault, %d purchase(s) refused meanwhile", e.ResumedAfter, e.Refused)
		} else {
			fmt.Fprintf(&b, "; no sale after the fault (%d refused)", e.Refused)
		}
		if e.Note != "" {
			b.WriteString("; " + e.Note)
		}
	}
	for _, m := range e.Timeline {
		fmt.Fprintf(&b, "\n    %7.3fs  %s", m.At, m.What)
	}
	return b.String()
}

func after(at, from float64) string {
	if at == 0 {
		return "not seen during the cut"
	}
	return fmt.Sprintf("at %.3fs", at-from)
}

// Headline is the event's first line (String without the timeline).
func (e *Event) Headline() string {
	s := e.String()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
