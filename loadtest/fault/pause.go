package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/cluster"
)

// pauseHolder pauses for 3x the lease the instance that holds the hot item's lock (an instance
// serving requests when the strategy takes no lock), then resumes it. For the first half of
// its 10 s search it takes only a holder that has not yet written with its token: one stopped
// between its write and its release has no late step left (its release, cut by the pause,
// lapses: the call times out on the resume, with no loss to tell and no write to refuse). A
// hold that keeps selling under one token (--stream-alone behind -route item, --stream-hold)
// writes early and goes on writing, so after that half any holder still holding the lock is
// taken, and the event says it had written.
func (c *Chaos) pauseHolder(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosPause}
	if !r.Strategy.TakesLock {
		in := c.cluster.Instances[r.Round%len(c.cluster.Instances)]
		ev.Note = "the strategy takes no Redis lock: an instance serving requests was paused"
		c.pause(ctx, ev, in, start)
		return ev
	}
	begin := time.Now()
	deadline := begin.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		anyHolder := time.Since(begin) >= 5*time.Second
		var paused *cluster.Instance
		written := false
		if c.eachHolder(ctx, r.HotID, func(h storeapi.Holder) bool {
			in := c.cluster.Instances[h.Index]
			ev.Attempts++
			ev.LockKey = h.Lock.Name
			if err := in.Pause(); err != nil {
				return false
			}
			// Stopped, it sends nothing more (a commit it sent to PostgreSQL just before may
			// still land); the lock is checked last.
			written = !c.unwritten(ctx, h.Index, r.HotID, h.Lock.Token)
			if (anyHolder || !written) && c.stillHeld(ctx, c.rdb, h.Lock) {
				ev.Token, ev.Confirmed, paused = h.Lock.Token, true, in
				return true
			}
			// It released the lock between the look-up and the SIGSTOP, or it has written
			// already: try again.
			_ = in.Resume()
			return false
		}) {
			if written {
				ev.Note = fmt.Sprintf("no holder was caught before its first write in 5s: this one had written with token %d already", ev.Token)
			}
			c.hold(ctx, ev, paused, start)
			return ev
		}
		if !c.wait(ctx, stop, 10*time.Millisecond) {
			break
		}
	}
	ev.Note = fmt.Sprintf("no instance was caught holding the lock of item %d (%d tries)", r.HotID, ev.Attempts)
	return ev
}

func (c *Chaos) pause(ctx context.Context, ev *Event, in *cluster.Instance, start time.Time) {
	if err := in.Pause(); err != nil {
		ev.Note = "pause failed: " + err.Error()
		return
	}
	c.hold(ctx, ev, in, start)
}

// hold keeps the already paused instance stopped for 3× the lease (less if ctx ends), then resumes it.
func (c *Chaos) hold(ctx context.Context, ev *Event, in *cluster.Instance, start time.Time) {
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
