package fault

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
)

// The fault kinds of -chaos mix.
const (
	mixPause         = "pause"                  // SIGSTOP an instance for 3x the lease
	mixKill          = "kill"                   // SIGKILL an instance, start it again on its port
	mixRedisEmpty    = "redis-restart-empty"    // SIGKILL redis-server, restart it without its snapshot
	mixRedisSnapshot = "redis-restart-snapshot" // SAVE, a lease of writes, SIGKILL, restart from the snapshot
	mixPartition     = "partition-flap"         // an instance's link to Redis cut and healed four times
	mixLatency       = "latency"                // 20-80ms each way on every link to Redis for 2x the lease
	mixClock         = "clock"                  // Redis's clock stepped 2x the lease forward while a holder works
	mixPostgres      = "postgres-restart"       // the private PostgreSQL stopped in immediate mode, started again
)

// mixKinds are the names of the fault kinds of -chaos mix (mixFaults), in the order the
// reports list them.
var mixKinds = func() []string {
	names := make([]string, len(mixFaults))
	for i, f := range mixFaults {
		names[i] = f.Name()
	}
	return names
}()

// MixKinds returns the names of the fault kinds of -chaos mix, in the order the reports list them.
func MixKinds() []string { return slices.Clone(mixKinds) }

// MixKindsOffered returns the kinds -chaos mix fires on a cluster with (privatePostgres) or
// without the private PostgreSQL server of -db postgres, whose restart is a kind of its own.
func MixKindsOffered(privatePostgres bool) []string {
	if privatePostgres {
		return MixKinds()
	}
	return slices.DeleteFunc(MixKinds(), func(k string) bool { return k == mixPostgres })
}

// DefaultMixGap is -mix-gap's default: the pause between two faults is drawn from [gap, 2*gap).
const DefaultMixGap = time.Second

// ErrCutShort is a fault that the end of the run interrupted: undone early, not counted as fired.
var ErrCutShort = errors.New("cut short by the end of the run")

// MixSchedule is what -chaos mix fired during one strategy's run. The schedule goes round the
// kinds, each round in a new random order, so that every kind fires once before any fires
// twice; a kind never fired in full (Missed) fails the run.
type MixSchedule struct {
	Kinds  []string       `json:"kinds"`            // the kinds the run had to fire
	Fired  map[string]int `json:"fired"`            // faults brought and undone in full, per kind
	Failed map[string]int `json:"failed,omitempty"` // faults that could not be brought (the error is on the timeline), per kind
	Missed []string       `json:"missed,omitempty"` // kinds never fired in full: the run was too short for the schedule
	Rounds int            `json:"rounds"`           // rounds completed
	Faults []MixFault     `json:"faults"`           // every fault, in order
}

// MixFault is one fault of the schedule, its times in seconds since the strategy's run began.
type MixFault struct {
	Kind    string  `json:"kind"`
	Round   int     `json:"round"`
	At      float64 `json:"at_s"`    // when it began (0: it never did)
	End     float64 `json:"end_s"`   // when it was undone
	What    string  `json:"what"`    // its first step, as on the timeline
	Outcome string  `json:"outcome"` // "fired", "cut short by the end of the run", or why it could not be brought
}

// Complete reports whether every kind fired at least once.
func (s *MixSchedule) Complete() bool { return len(s.Missed) == 0 }

// summary is the schedule's last line on the timeline: the count per kind, and what was missed.
func (s *MixSchedule) summary() string {
	parts := make([]string, 0, len(s.Kinds))
	for _, k := range s.Kinds {
		parts = append(parts, fmt.Sprintf("%s×%d", k, s.Fired[k]))
	}
	line := fmt.Sprintf("fault schedule: %d fault(s) in %d full round(s): %s", len(s.Faults), s.Rounds, strings.Join(parts, " "))
	if s.Complete() {
		return line + "; every kind fired"
	}
	return line + "; MISSED " + strings.Join(s.Missed, ", ") + ": " + mixMissedHint
}

// mixMissedHint tells what to do when the schedule missed a kind.
const mixMissedHint = "the run ended before every kind fired (give a longer -duration or a shorter -mix-gap)"

// mixOrder returns the kinds of one round in a random order.
func mixOrder(rng *rand.Rand, kinds []string) []string {
	order := slices.Clone(kinds)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

// mixKindsOf returns the kinds the schedule must fire on cl: those available on it, but for
// the kinds of skip (-mix-skip).
func mixKindsOf(cl *cluster.Cluster, skip ...string) []string {
	var kinds []string
	for _, f := range mixFaults {
		if f.Available(cl) == nil && !slices.Contains(skip, f.Name()) {
			kinds = append(kinds, f.Name())
		}
	}
	return kinds
}

// mixFault returns the fault of the mix schedule named kind.
func mixFault(kind string) Fault {
	for _, f := range mixFaults {
		if f.Name() == kind {
			return f
		}
	}
	return nil
}

// mix brings one fault after another until the run ends, a random pause of [gap, 2*gap)
// before each, going round the kinds (mixKinds) in a random order per round; each fault is
// undone before the next. Every step is on the timeline, and the last line counts the faults
// per kind; the invariants and the history are checked at the end as in every run.
func (c *Chaos) mix(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosMix}
	kinds := mixKindsOf(c.cluster, c.mixSkip...)
	sched := &MixSchedule{Kinds: kinds, Fired: map[string]int{}, Failed: map[string]int{}}
	ev.Mix = sched
	rng := rand.New(rand.NewPCG(uint64(r.Round)+1, uint64(r.HotID)))
	gap := c.mixGap
	if gap <= 0 {
		gap = DefaultMixGap
	}
	m := &Injection{c: c, ctx: ctx, stop: stop, start: start, ev: ev, rng: rng, run: r}
schedule:
	for round := 0; len(kinds) > 0; round++ {
		for _, kind := range mixOrder(rng, kinds) {
			if !c.wait(ctx, stop, gap+time.Duration(rng.Int64N(int64(gap)))) {
				break schedule
			}
			f := MixFault{Kind: kind, Round: round}
			first := len(ev.Timeline)
			at, err := mixFault(kind).Inject(m)
			f.At, f.End = at, time.Since(start).Seconds()
			if len(ev.Timeline) > first {
				f.What = ev.Timeline[first].What
			}
			switch {
			case errors.Is(err, ErrCutShort):
				f.Outcome = ErrCutShort.Error()
				ev.mark(start, "%s %s", kind, ErrCutShort)
			case err != nil:
				f.Outcome = err.Error()
				sched.Failed[kind]++
				ev.mark(start, "%s could not be brought: %v", kind, err)
			default:
				f.Outcome = "fired"
				sched.Fired[kind]++
			}
			if at > 0 && ev.FaultAt == 0 {
				ev.FaultAt, ev.PausedAt = at, at
			}
			sched.Faults = append(sched.Faults, f)
			if errors.Is(err, ErrCutShort) {
				break schedule
			}
		}
		sched.Rounds = round + 1
		if sched.Rounds == m.c.mixRounds {
			close(r.Rounds) // the run may end now (-mix-rounds)
		}
	}
	if r.Rounds != nil && sched.Rounds < m.c.mixRounds {
		close(r.Rounds)
	}
	for _, k := range kinds {
		if sched.Fired[k] == 0 {
			sched.Missed = append(sched.Missed, k)
		}
	}
	ev.ResumedAt = ev.mark(start, "%s", sched.summary())
	switch {
	case len(kinds) == 0:
		c.wait(ctx, stop, time.Duration(math.MaxInt64)) // until the run ends
		ev.Note = "no fault kind of the schedule is available on this cluster (-mix-skip)"
	case len(sched.Faults) == 0:
		ev.Note = "the run ended before the first fault"
	}
	return ev
}

// judgeMix fails a strategy's run whose fault schedule missed a kind.
func judgeMix(_ config.Config, res *Outcome, _ time.Time, _ []*client.Purchase, _ bool) []string {
	switch {
	case res.Event == nil || res.Event.Mix == nil:
		return []string{"the fault schedule fired nothing: " + mixMissedHint}
	case len(res.Event.Mix.Kinds) == 0:
		return []string{"the fault schedule had no kind to fire on this cluster (-mix-skip left none that it offers)"}
	case !res.Event.Mix.Complete():
		return []string{fmt.Sprintf("the fault schedule missed %s: %s", strings.Join(res.Event.Mix.Missed, ", "), mixMissedHint)}
	}
	return nil
}
