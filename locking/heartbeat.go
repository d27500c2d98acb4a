package locking

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Every Client has a process id, and, once a WithTakeover Obtain has run, a process key that
// says the process is alive: P{process:<id>}… precisely c.processKey(id), a string with a
// TTL of Options.ProcessTTL, renewed every ProcessTTL/3 by one timer of the Client (one Redis
// call per Client, not per lock). A takeover waiter that finds the key gone takes the lock of
// that process's owners (takeover.go). The key is in its own hash slot: on a Cluster a waiter
// reads it in one call and evicts the dead owner in another, in the lock's own slot.

// DefaultProcessTTLMin is the least default of Options.ProcessTTL.
const DefaultProcessTTLMin = time.Second

// processTTL is Options.ProcessTTL: by default max(1s, 3·CallTimeout), and never less than
// 3·CallTimeout, so that a renewal sent every TTL/3, each bounded by CallTimeout, lands before
// the key lapses while Redis answers.
func (o *Options) processTTL(callTimeout time.Duration) time.Duration {
	d := max(DefaultProcessTTLMin, 3*callTimeout)
	if o != nil && o.ProcessTTL > 0 {
		d = o.ProcessTTL
	}
	return max(d, 3*callTimeout)
}

// processKey is the Redis key that says process id is alive.
func (c *Client) processKey(id string) string { return c.prefix + "process:{" + id + "}" }

// heartbeat keeps a Client's process key alive: started by the first WithTakeover Obtain,
// stopped by Close. Its mutex guards its fields only and is never held across a Redis call:
// a caller that waits for another's call waits on a channel, with its own context, so a hung
// Redis costs each caller at most its own CallTimeout (and a simulated clock, which moves only
// while every goroutine waits on a channel or a timer, keeps moving: sim/).
type heartbeat struct {
	running  atomic.Bool // set once the key was first written: later Obtains take no lock
	mu       sync.Mutex
	started  bool
	closed   bool
	starting chan struct{} // the first write in flight; closed when it ends
	timer    *time.Timer
	beating  chan struct{} // the renewal in flight; closed when it ends (stop waits for it)
}

// startHeartbeat sets the process key once, synchronously, and starts its renewals. Later
// calls return at once: the first takeover Obtain of a Client pays one round trip, none after
// it; Obtains that arrive while that round trip is in flight wait for it (or for their
// context). Before the key is set no lock of this Client names its process, so no waiter can
// take a live holder's lock for a key that was never written.
func (c *Client) startHeartbeat(ctx context.Context) error {
	hb := &c.hb
	for !hb.running.Load() {
		hb.mu.Lock()
		if hb.started || hb.closed {
			hb.mu.Unlock()
			return nil
		}
		if inflight := hb.starting; inflight != nil {
			hb.mu.Unlock()
			select {
			case <-inflight: // written (running) or failed (this caller tries itself)
				continue
			case <-ctx.Done():
				return fmt.Errorf("locking: process key: %w", context.Cause(ctx))
			}
		}
		done := make(chan struct{})
		hb.starting = done
		hb.mu.Unlock()

		err := c.beatOnce(ctx)

		hb.mu.Lock()
		hb.starting = nil
		closed := hb.closed
		if err == nil && !closed {
			hb.started = true
			hb.timer = time.AfterFunc(c.processTTL/3, c.beat)
			hb.running.Store(true)
		}
		hb.mu.Unlock()
		close(done)
		switch {
		case err != nil:
			return fmt.Errorf("locking: process key: %w", err)
		case closed: // Close ran during the write: it did not see the key, so it goes here
			c.deleteProcessKey()
			return ErrClosed
		}
		return nil
	}
	return nil
}

// beat is one renewal of the process key, on the heartbeat's timer. A failed renewal is
// retried sooner (ProcessTTL/10): the key lapses only when Redis stays unreachable for most
// of ProcessTTL.
func (c *Client) beat() {
	hb := &c.hb
	hb.mu.Lock()
	if hb.closed {
		hb.mu.Unlock()
		return
	}
	done := make(chan struct{})
	hb.beating = done
	hb.mu.Unlock()
	defer close(done)

	next := c.processTTL / 3
	if err := c.beatOnce(context.Background()); err != nil {
		next = max(c.processTTL/10, 10*time.Millisecond)
		c.log.Debug("locking: process key renewal failed", "err", err)
	}
	hb.mu.Lock()
	if !hb.closed {
		hb.timer.Reset(next)
	}
	hb.mu.Unlock()
}

// beatOnce sets the process key for one ProcessTTL, within one CallTimeout.
func (c *Client) beatOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
	defer cancel()
	return c.rdb.Set(cctx, c.processKey(c.process), "1", c.processTTL).Err()
}

// deleteProcessKey deletes the process key, best effort, within one CallTimeout.
func (c *Client) deleteProcessKey() {
	ctx, cancel := context.WithTimeout(context.Background(), c.callTimeout)
	defer cancel()
	_ = c.rdb.Del(ctx, c.processKey(c.process)).Err()
}

// stopHeartbeat stops the renewals, waits for one in flight (a renewal landing after the
// delete would bring the key back), and deletes the process key (best effort): the locks of
// this Client that are still held become takeover's to take. A first write still in flight
// deletes the key itself when it ends (startHeartbeat).
func (c *Client) stopHeartbeat() {
	hb := &c.hb
	hb.mu.Lock()
	hb.closed = true
	started, t, beating := hb.started, hb.timer, hb.beating
	hb.mu.Unlock()
	if !started {
		return
	}
	if !t.Stop() && beating != nil {
		<-beating // the timer fired: its renewal ends (within one CallTimeout) before the delete
	}
	c.deleteProcessKey()
}

// Process returns the Client's process id: its WithTakeover locks name it (their owner token
// is random@process in the lock hash), and its process key, c.prefix+"process:{id}", says it is
// alive. Operators match it with the storefront's start-up log to see which process holds a lock.
func (c *Client) Process() string { return c.process }
