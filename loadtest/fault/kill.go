package fault

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// -chaos kill: the instance whose process holds the hot item's lock is killed (SIGKILL: it
// releases nothing, as an OOM kill or a lost node), started again, and killed again once
// selling resumed, -kills times. Each kill's sales gap runs from the kill to the first 201 of
// the hot item answered by another instance for a request sent after the kill: lock+guard's
// waiters take a dead process's lock over (locking.WithTakeover) about a second after it died,
// lock waits out its lease.

// killSettle is how long the run sells after selling resumed, before the next kill: the hot
// lock passes from process to process again.
const killSettle = time.Second

// killFind bounds the search for the hot lock's holder before one kill.
const killFind = StepWait

// KillFigures are the kills of one strategy's run.
type KillFigures struct {
	Asked int    `json:"asked"` // -kills
	Kills []Kill `json:"kills"` // every kill, in order
	// WorstGapS and MedianGapS are over the kills whose gap was seen (-1: none was); a kill
	// whose gap was never seen counts as the worst. WorstSentAfterS and MedianSentAfterS are
	// the same of the gaps to a request sent after the kill (Kill.SentAfterS).
	WorstGapS        float64 `json:"worst_gap_s"`
	MedianGapS       float64 `json:"median_gap_s"`
	WorstSentAfterS  float64 `json:"worst_sent_after_s"`
	MedianSentAfterS float64 `json:"median_sent_after_s"`
	// Sold is the hot item's units answered 201 per BucketS seconds since the run began, for
	// the HTML report's throughput plot, where the gaps are drawn.
	BucketS float64 `json:"bucket_s"`
	Sold    []int   `json:"hot_sold"`
}

// Kill is one kill of the hot lock's holder, its times in seconds since the run began.
type Kill struct {
	Instance  int     `json:"instance"`
	PID       int     `json:"pid"`
	Process   string  `json:"process,omitempty"` // the lock Client's process id (its "lock process" log line)
	Token     int64   `json:"token"`             // the hot lock's fencing token it held (the item's latest, read once it was stopped)
	Confirmed string  `json:"confirmed"`         // how Redis showed it still held the lock once stopped
	At        float64 `json:"at_s"`              // the SIGKILL
	Restarted float64 `json:"restarted_at_s"`    // the instance ready again (a new process)
	// GapS is the sales gap: from the kill to the next 201 of the hot item answered by
	// another instance under a lock taken after the kill: its fencing token is above Token (a
	// strategy whose receipts carry no token: a request sent after the kill). -1: none before
	// the run ended.
	GapS float64 `json:"gap_s"`
	// SentAfterS is the same to the first such 201 of a request sent after the kill, an
	// upper bound by up to one request's time (a request sent before the kill may wait in
	// the lock's queue and be sold first), as TestKilledHolderTakenOver measures it.
	SentAfterS float64 `json:"sent_after_s"`
}

// WorstGapMS is the worst sales gap of the run in milliseconds (the -threshold metric gap);
// +Inf when no kill was brought or one's gap was never seen.
func (k *KillFigures) WorstGapMS() float64 {
	if k == nil || len(k.Kills) == 0 || k.WorstGapS < 0 {
		return math.Inf(1)
	}
	for _, x := range k.Kills {
		if x.GapS < 0 {
			return math.Inf(1)
		}
	}
	return k.WorstGapS * 1000
}

// killHolders kills the hot lock's holder and starts it again, Kills times, waiting each time
// for a sale of the hot item after the kill and killSettle more; then it closes r.Rounds (the
// run may end).
func (c *Chaos) killHolders(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosKill, Kill: &KillFigures{Asked: c.kills}}
	defer func() {
		if r.Rounds != nil {
			close(r.Rounds)
		}
	}()
	if !r.Strategy.TakesLock {
		ev.Note = "the strategy takes no lock: no holder to kill"
		return ev
	}
	x := &Injection{c: c, ctx: ctx, stop: stop, start: start, ev: ev, run: r}
	for n := range c.kills {
		k, err := x.killHolder(n + 1)
		if err != nil {
			ev.Note = err.Error()
			ev.mark(start, "kill %d: %v", n+1, err)
			return ev
		}
		if ev.FaultAt == 0 {
			ev.FaultAt, ev.PausedAt = k.At, k.At
			ev.Instance, ev.PID, ev.Token = k.Instance, k.PID, k.Token
		}
		ev.Kill.Kills = append(ev.Kill.Kills, k)
		if !x.awaitSale(k) || !c.wait(ctx, stop, killSettle) {
			break
		}
	}
	ev.ResumedAt = ev.mark(start, "%d kill(s) of %d asked", len(ev.Kill.Kills), c.kills)
	return ev
}

// killHolder finds the instance that holds the hot item's lock, stops it (SIGSTOP) and, if
// Redis shows it still holds the lock, kills it (SIGKILL) and starts it again; else it lets
// it go on and looks again.
func (m *Injection) killHolder(n int) (Kill, error) {
	deadline := time.Now().Add(killFind)
	for time.Now().Before(deadline) {
		h, ok := m.holder()
		if !ok {
			if !m.wait(5 * time.Millisecond) {
				return Kill{}, ErrCutShort
			}
			continue
		}
		in := m.c.cluster.Instances[h.Index]
		if err := in.Pause(); err != nil {
			continue // it died or was stopped meanwhile: look again
		}
		confirmed, token := m.c.heldBy(m.ctx, h.Lock, in.LockProcess())
		if confirmed == "" {
			_ = in.Resume()
			if !m.wait(5 * time.Millisecond) {
				return Kill{}, ErrCutShort
			}
			continue
		}
		k := Kill{Instance: h.Index, PID: h.PID, Process: in.LockProcess(), Token: token, Confirmed: confirmed}
		k.At = m.mark("kill %d: instance %d (pid %d, process %s) holds %s token %d (%s): killed (SIGKILL)",
			n, h.Index, h.PID, cmpOr(k.Process, "?"), h.Lock.Name, token, confirmed)
		again, err := m.c.cluster.RestartInstance(m.ctx, h.Index, 0)
		if err != nil {
			return k, fmt.Errorf("start instance %d again: %w", h.Index, err)
		}
		k.Restarted = m.mark("kill %d: instance %d running again (pid %d, process %s) and ready", n, h.Index, again.PID(), cmpOr(again.LockProcess(), "?"))
		k.GapS = -1
		return k, nil
	}
	return Kill{}, fmt.Errorf("no instance seen holding the hot item's lock in %s", killFind)
}

// heldBy tells how Redis shows, once its holder is stopped, that the lock l is still held by
// the process named process: one owner of the lock's hash that names it (the owner token ends
// in "@process" or "#process", locking.HolderProcess), else (an instance that logs no
// process) the fencing counter still at l's token with the lock's key present; "" when not.
// It returns the item's latest fencing token too, the one the stopped holder holds (it may
// have taken the lock again since l).
func (c *Chaos) heldBy(ctx context.Context, l storeapi.HeldLock, process string) (string, int64) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if storeapi.Settle(cctx, c.rdb) != nil {
		return "", 0
	}
	if process == "" {
		if storeapi.StillHeld(cctx, c.rdb, l) {
			return "token still current in Redis", l.Token
		}
		return "", 0
	}
	owners, err := c.rdb.HKeys(cctx, l.RedisKey).Result()
	if err != nil {
		return "", 0
	}
	token := l.Token
	if l.FenceKey != "" {
		if token, err = c.rdb.Get(cctx, l.FenceKey).Int64(); err != nil {
			return "", 0
		}
	}
	for _, o := range owners {
		if strings.HasSuffix(o, "@"+process) || strings.HasSuffix(o, "#"+process) {
			return "its process owns the lock in Redis", token
		}
	}
	return "", 0
}

// awaitSale waits until an instance other than the killed one has sold the hot item since
// the kill (its sold units grew), or the run ends, or a lease and StepWait passed (false). It
// paces the kills; the gap itself is read from the answers after the run (Event.Settle).
func (m *Injection) awaitSale(k Kill) bool {
	deadline := time.Now().Add(m.c.lease + StepWait)
	next := (k.Instance + 1) % len(m.c.apis)
	other := m.c.apis[next]
	sold := func() int {
		cctx, cancel := context.WithTimeout(m.ctx, time.Second)
		defer cancel()
		stats, err := other.Stats(cctx)
		if err != nil {
			return -1
		}
		for _, s := range stats {
			if s.ItemID == m.run.HotID {
				return s.SoldUnits
			}
		}
		return -1
	}
	base := sold()
	for {
		if !m.wait(20 * time.Millisecond) {
			return false
		}
		if time.Now().After(deadline) {
			m.mark("no sale of the hot item seen on instance %d within %s of the kill: no more kills", next, m.c.lease+StepWait)
			return false
		}
		switch s := sold(); {
		case base < 0:
			base = s
		case s > base:
			return true
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// settleKills fills in each kill's sales gap from the answers (attempt j of a purchase went to
// instance (Instance+j) mod instances), the worst and median, and the hot item's sales per
// bucket.
func (k *KillFigures) settle(start time.Time, purchases []*client.Purchase, instances int, hotID int64) {
	const bucket = 0.1
	k.BucketS = bucket
	k.Sold = k.Sold[:0]
	for i := range k.Kills {
		k.Kills[i].GapS, k.Kills[i].SentAfterS = -1, -1
	}
	for _, p := range purchases {
		for j, r := range p.Attempts {
			if r.Status != 201 || r.Receipt.ItemID != hotID {
				continue
			}
			end := r.Start.Add(r.Latency).Sub(start).Seconds()
			if b := int(end / bucket); b >= 0 {
				for len(k.Sold) <= b {
					k.Sold = append(k.Sold, 0)
				}
				k.Sold[b] += max(r.Receipt.Quantity, 1)
			}
			sent := r.Start.Sub(start).Seconds()
			inst := (p.Instance + j) % max(instances, 1)
			tok := r.Receipt.FenceToken
			for i := range k.Kills {
				x := &k.Kills[i]
				if inst == x.Instance || end < x.At {
					continue
				}
				if (tok > x.Token || tok == 0 && sent > x.At) && (x.GapS < 0 || end-x.At < x.GapS) {
					x.GapS = end - x.At
				}
				if sent > x.At && (x.SentAfterS < 0 || end-x.At < x.SentAfterS) {
					x.SentAfterS = end - x.At
				}
			}
		}
	}
	k.WorstGapS, k.MedianGapS = worstMedian(k.Kills, func(x Kill) float64 { return x.GapS })
	k.WorstSentAfterS, k.MedianSentAfterS = worstMedian(k.Kills, func(x Kill) float64 { return x.SentAfterS })
}

// worstMedian returns the worst and the median of the gaps of kills that were seen (-1, -1:
// none was).
func worstMedian(kills []Kill, gap func(Kill) float64) (worst, med float64) {
	var gaps []float64
	for _, x := range kills {
		if g := gap(x); g >= 0 {
			gaps = append(gaps, g)
		}
	}
	if len(gaps) == 0 {
		return -1, -1
	}
	slices.Sort(gaps)
	return gaps[len(gaps)-1], median(gaps)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// String describes the kills in one line: each one's gap, the worst and the median.
func (k *KillFigures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d kill(s) of the hot lock's holder (of %d asked); sales gaps", len(k.Kills), k.Asked)
	for _, x := range k.Kills {
		if x.GapS < 0 {
			b.WriteString(" never")
		} else {
			fmt.Fprintf(&b, " %.2fs", x.GapS)
		}
	}
	switch {
	case k.WorstGapS >= 0 && math.IsInf(k.WorstGapMS(), 1):
		fmt.Fprintf(&b, "; of the gaps seen: worst %.2fs, median %.2fs", k.WorstGapS, k.MedianGapS)
	case k.WorstGapS >= 0:
		fmt.Fprintf(&b, "; worst %.2fs, median %.2fs", k.WorstGapS, k.MedianGapS)
	}
	if k.WorstSentAfterS >= 0 {
		fmt.Fprintf(&b, " (to a request sent after the kill: worst %.2fs, median %.2fs)", k.WorstSentAfterS, k.MedianSentAfterS)
	}
	return b.String()
}

// judgeKill fails a strategy's run in which fewer kills were brought than asked, or after one
// of which no other instance sold the hot item before the run ended (its gap is unknown).
func judgeKill(_ config.Config, res *Outcome, _ time.Time, _ []*client.Purchase, takesLock bool) []string {
	if !takesLock {
		return nil
	}
	ev := res.Event
	if ev == nil || ev.Kill == nil {
		return []string{"no kill was brought"}
	}
	var miss []string
	if len(ev.Kill.Kills) < ev.Kill.Asked {
		note := ""
		if ev.Note != "" {
			note = ": " + ev.Note
		}
		miss = append(miss, fmt.Sprintf("%d of %d kill(s) brought%s", len(ev.Kill.Kills), ev.Kill.Asked, note))
	}
	for i, x := range ev.Kill.Kills {
		if x.GapS < 0 {
			miss = append(miss, fmt.Sprintf("kill %d: no other instance sold the hot item after it before the run ended", i+1))
		}
	}
	return miss
}
