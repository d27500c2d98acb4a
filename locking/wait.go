package locking

import (
	"context"
	"errors"
	"time"
)

// waitLoop is the waiting half of Obtain, separate from the attempt so that other lock
// kinds (fair lock, semaphore) reuse it with their own attempt and channel.
//
// It registers a waiter on channel and waits for the subscription to be confirmed (bounded
// by CallTimeout), so that any release published from then on is seen. The head of the
// queue then calls attempt at once; a waiter queued behind others of this Client first
// waits to be woken (or for one lease, should every message be missed), so that it does not
// overtake them. attempt reports whether it succeeded, or how long at most to sleep before
// trying again (the holder's remaining lease), or an error, which ends the wait. Between
// attempts it sleeps until a message on channel, that time, ctx's end or the wait limit
// (zero or negative: none). hint is the caller's failed attempt's (0: none made, or no
// hint); only spin mode, which sleeps before its first attempt, uses it. It returns nil
// once attempt succeeded, ErrNotObtained (joined with ctx.Err() when ctx ended the wait), or
// attempt's error.
func (c *Client) waitLoop(ctx context.Context, channel string, limit, hint time.Duration,
	attempt func(context.Context) (bool, time.Duration, error)) error {
	if c.family.spin != nil { // spin mode: poll with backoff, no subscription (spin.go)
		return spinWait(ctx, *c.family.spin, limit, hint, attempt)
	}
	var limitC <-chan time.Time
	if limit > 0 {
		lt := time.NewTimer(limit)
		defer lt.Stop()
		limitC = lt.C
	}
	w, head, err := c.notify.register(ctx, channel)
	if err != nil {
		return err
	}
	acquired := false
	defer func() { c.notify.unregister(w, acquired) }()

	timer := time.NewTimer(c.callTimeout)
	defer timer.Stop()
	opened, _ := c.breakers.wake()
	select {
	case <-w.ready:
	case <-timer.C: // not confirmed yet: rely on the timer until it is
	case <-opened: // the node hangs: the attempt below fails at once
	case <-ctx.Done():
		return errors.Join(ErrNotObtained, ctx.Err())
	case <-limitC:
		return ErrNotObtained
	}
	sleep := time.Duration(0) // the head tries at once
	if !head {
		sleep = c.lease
	}
	for {
		if sleep > 0 {
			if err := c.sleep(ctx, w, channel, timer, sleep, limitC); err != nil {
				return err
			}
		}
		c.notify.tried(w) // a message from now on wakes this waiter again
		ok, ttl, err := attempt(ctx)
		if err != nil {
			return err
		}
		if ok {
			acquired = true
			return nil
		}
		// ttl is the holder's remaining lease; -1 (no expiry) should not happen, and <= 0
		// means it just expired: retry soon.
		sleep = max(ttl, time.Millisecond)
	}
}

// sleep is one sleep of waitLoop's waiter w: until a message on its channel, d, a breaker's
// opening, ctx's end or the wait limit (limitC), which give the wait's error. A breaker that
// opens wakes the waiter: its next attempt fails at once. While one is open, no sleep is
// longer than a probe interval (a hung node sends no message). With breakers, every
// livenessEvery of sleep without a message the node's liveness is checked (liveness.go).
func (c *Client) sleep(ctx context.Context, w *waiter, channel string, timer *time.Timer, d time.Duration,
	limitC <-chan time.Time) error {
	opened, open := c.breakers.wake()
	if open {
		d = min(d, c.breakers.probeInterval)
	}
	var liveC <-chan time.Time
	if c.breakers != nil && d > c.livenessEvery() {
		live := time.NewTicker(c.livenessEvery())
		defer live.Stop()
		liveC = live.C
	}
	timer.Reset(d)
	c.notify.sleeping.Add(1)
	defer c.notify.sleeping.Add(-1)
	for {
		select {
		case <-liveC:
			c.checkLiveness(channel)
			continue
		case <-opened:
		case <-w.wake:
			c.notify.wokenByMessage.Add(1)
		case <-timer.C:
			c.notify.wokenByTimer.Add(1)
		case <-ctx.Done():
			return errors.Join(ErrNotObtained, ctx.Err())
		case <-limitC:
			return ErrNotObtained
		}
		return nil
	}
}
