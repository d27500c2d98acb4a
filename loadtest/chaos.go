package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// ChaosEvent reports the fault a chaos mode brought during one strategy's run (a pause of an
// instance, a failover, a cut, a hang, the fault schedule of -chaos mix) and its timeline.
type ChaosEvent struct {
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

	// -chaos failover and partition (faults.go)
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
}

// Milestone is one step of a fault, in seconds since the strategy's run began.
type Milestone struct {
	At   float64 `json:"at_s"`
	What string  `json:"what"`
}

// String describes the event in one line.
func (e *ChaosEvent) String() string {
	if e.Hang != nil {
		return e.Hang.String()
	}
	if m, _ := modeOf(e.Mode); m.name != chaosPause {
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

// chaos brings the fault of a chaos mode (modes.go) to the instances of a self-contained
// cluster during each strategy's run.
type chaos struct {
	mode    chaosMode
	cluster *Cluster
	apis    []*api
	rdb     *redis.Client // the Redis of the locks (pause, partition); nil for failover
	lease   time.Duration
	// -chaos redis-hang, db-hang: how long the process stays stopped; the instances' --on-redis-down
	hangFor     time.Duration
	onRedisDown string
	// -chaos mix: the pause between two faults is drawn from [mixGap, 2*mixGap)
	mixGap time.Duration
	// -chaos mix: > 0 holds the run until that many full rounds fired (chaosRun.rounds)
	mixRounds int
	// -chaos failover: the instances' --lock-replicas (faults.go)
	lockReplicas int
}

// chaosRun is the strategy's run a fault is brought to.
type chaosRun struct {
	strategy storeapi.Strategy // as the server describes it
	hotID    int64             // the hot item
	round    int               // the run's number
	// rounds, when not nil, is closed by -chaos mix once cfg.MixRounds full rounds fired (or
	// the schedule ended): the run goes on until then.
	rounds chan struct{}
}

// run waits a little into the run (200 ms; 20 ms for a strategy that takes a lock), then
// brings the mode's fault. It returns early, without a fault, when stop closes first. It never
// leaves a process stopped.
func (c *chaos) run(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	// A lock strategy is looked at from 20 ms in: lock+guard's holds sell to every buyer
	// waiting for them, so the hot item may be sold out, and its lock free for good, well
	// before 200 ms.
	first := 200 * time.Millisecond
	if r.strategy.TakesLock {
		first = 20 * time.Millisecond
	}
	if !c.wait(ctx, stop, first) {
		return &ChaosEvent{Mode: c.mode.name, Note: "the run ended before the fault"}
	}
	return c.mode.inject(c, ctx, stop, start, r)
}

// wait waits d; false when stop closes or ctx ends first.
func (c *chaos) wait(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// pauseHolder pauses for 3x the lease the instance that holds the hot item's lock (an instance
// serving requests when the strategy takes no lock), then resumes it.
func (c *chaos) pauseHolder(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosPause}
	if !r.strategy.TakesLock {
		in := c.cluster.Instances[r.round%len(c.cluster.Instances)]
		ev.Note = "the strategy takes no Redis lock: an instance serving requests was paused"
		c.pause(ctx, ev, in, start)
		return ev
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var paused *Instance
		if c.eachHolder(ctx, r.hotID, func(h storeapi.Holder) bool {
			in := c.cluster.Instances[h.Index]
			ev.Attempts++
			ev.LockKey = h.Lock.Name
			if err := in.Pause(); err != nil {
				return false
			}
			if c.stillHeld(ctx, c.rdb, h.Lock) {
				ev.Token, ev.Confirmed, paused = h.Lock.Token, true, in
				return true
			}
			_ = in.Resume() // it released the lock between the look-up and the SIGSTOP: try again
			return false
		}) {
			c.hold(ctx, ev, paused, start)
			return ev
		}
		if !c.wait(ctx, stop, 10*time.Millisecond) {
			break
		}
	}
	ev.Note = fmt.Sprintf("no instance was caught holding the lock of item %d (%d tries)", r.hotID, ev.Attempts)
	return ev
}

// holders returns the instances of the cluster that hold item itemID's lock, in order; an
// answer from another process than the instance's own (a port taken over) is left out.
func (c *chaos) holders(ctx context.Context, itemID int64) []storeapi.Holder {
	var out []storeapi.Holder
	c.eachHolder(ctx, itemID, func(h storeapi.Holder) bool {
		out = append(out, h)
		return false
	})
	return out
}

// eachHolder asks the instances one after the other which holds item itemID's lock, and calls
// fn on each holder as soon as it answered (a fault lands while the holder is still where it
// was seen), until fn returns true; it reports whether one did.
func (c *chaos) eachHolder(ctx context.Context, itemID int64, fn func(storeapi.Holder) bool) bool {
	for i, in := range c.cluster.Instances {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		h, ok := storeapi.FindHolder(cctx, c.apis[0].hc, []string{in.URL}, itemID)
		cancel()
		if !ok || h.PID != in.PID() {
			continue
		}
		h.Index = i
		if fn(h) {
			return true
		}
	}
	return false
}

// stillHeld checks on rdb that the lock is still held as l: no one took it after l's holder.
func (c *chaos) stillHeld(ctx context.Context, rdb *redis.Client, l storeapi.HeldLock) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return storeapi.StillHeld(cctx, rdb, l)
}

func (c *chaos) pause(ctx context.Context, ev *ChaosEvent, in *Instance, start time.Time) {
	if err := in.Pause(); err != nil {
		ev.Note = "pause failed: " + err.Error()
		return
	}
	c.hold(ctx, ev, in, start)
}

// hold keeps the already paused instance stopped for 3× the lease (less if ctx ends), then resumes it.
func (c *chaos) hold(ctx context.Context, ev *ChaosEvent, in *Instance, start time.Time) {
	ev.Paused, ev.Instance, ev.PID, ev.URL = true, in.Index, in.PID(), in.URL
	ev.PausedAt = time.Since(start).Seconds()
	ev.FaultAt = ev.PausedAt
	t := time.NewTimer(3 * c.lease)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	_ = in.Resume()
	ev.ResumedAt = time.Since(start).Seconds()
}
