package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ChaosEvent reports one pause of an instance during a strategy's run.
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
}

// Milestone is one step of a fault, in seconds since the strategy's run began.
type Milestone struct {
	At   float64 `json:"at_s"`
	What string  `json:"what"`
}

// String describes the event in one line.
func (e *ChaosEvent) String() string {
	if e.Mode == "failover" || e.Mode == "partition" {
		return e.faultString()
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

// chaos pauses instances of a self-contained cluster, or (faults.go) fails its Redis over or
// cuts an instance's link to Redis.
type chaos struct {
	mode    string // pause, failover or partition
	cluster *Cluster
	apis    []*api
	rdb     *redis.Client // the Redis of the locks (pause, partition); nil for failover
	lease   time.Duration
}

// usesLock reports whether strategy takes the per-item Redis lock.
func usesLock(strategy string) bool { return strategy == "lock" || strategy == "lock+guard" }

// run waits a little into the run (200 ms; 20 ms for a lock strategy), then pauses for 3× the lease the instance that holds the hot
// item's lock (any instance with requests in flight when the strategy takes no lock), and resumes
// it. It returns early, without a pause, when stop closes first. It never leaves a process stopped.
func (c *chaos) run(ctx context.Context, stop <-chan struct{}, start time.Time, strategy string, hotID int64, round int) *ChaosEvent {
	ev := &ChaosEvent{Mode: "pause"}
	wait := func(d time.Duration) bool {
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
	// A lock strategy is looked at from 20 ms in: lock+guard's holds sell to every buyer
	// waiting for them, so the hot item may be sold out, and its lock free for good, well
	// before 200 ms.
	first := 200 * time.Millisecond
	if usesLock(strategy) {
		first = 20 * time.Millisecond
	}
	if !wait(first) {
		ev.Note = "the run ended before the pause"
		return ev
	}
	switch c.mode {
	case "failover":
		return c.failover(ctx, stop, start, hotID)
	case "partition":
		return c.partition(ctx, stop, start, hotID)
	}
	if !usesLock(strategy) {
		in := c.cluster.Instances[round%len(c.cluster.Instances)]
		ev.Note = "the strategy takes no Redis lock: an instance serving requests was paused"
		c.pause(ctx, ev, in, start)
		return ev
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, a := range c.apis {
			in := c.cluster.Instances[i]
			l, ok := c.holds(ctx, a, in, hotID)
			if !ok {
				continue
			}
			ev.Attempts++
			ev.LockKey = l.Name
			if err := in.Pause(); err != nil {
				continue
			}
			if c.confirm(ctx, l) {
				ev.Token, ev.Confirmed = l.Token, true
				c.hold(ctx, ev, in, start)
				return ev
			}
			_ = in.Resume() // it released the lock between the look-up and the SIGSTOP: try again
		}
		if !wait(10 * time.Millisecond) {
			break
		}
	}
	ev.Note = fmt.Sprintf("no instance was caught holding the lock of item %d (%d tries)", hotID, ev.Attempts)
	return ev
}

// holds asks instance in whether it holds the lock of item itemID, and returns that lock.
func (c *chaos) holds(ctx context.Context, a *api, in *Instance, itemID int64) (heldLock, bool) {
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	dl, found, err := a.locks(cctx)
	if err != nil || !found || dl.PID != in.PID() {
		return heldLock{}, false
	}
	for _, l := range dl.Locks {
		if l.ItemID == itemID {
			return l, true
		}
	}
	return heldLock{}, false
}

// confirm checks in Redis that the lock's key exists and its fencing counter is still the
// lock's token: no one took the lock after the paused holder.
func (c *chaos) confirm(ctx context.Context, l heldLock) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	got, err := c.rdb.Get(cctx, l.FenceKey).Int64()
	if err != nil || got != l.Token {
		return false
	}
	n, err := c.rdb.Exists(cctx, l.RedisKey).Result()
	return err == nil && n == 1
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
