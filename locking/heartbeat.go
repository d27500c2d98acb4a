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
// stopped by Close.
type heartbeat struct {
	running atomic.Bool // set once the key was first written: later Obtains take no lock
	// first is held (one slot) by the Obtain that writes the key first, across its round
	// trip: a channel, not a mutex, so that the Obtains queued behind it wait as their
	// contexts allow, and a waiter is durably blocked (a mutex held across a Redis call that
	// waits on the clock froze the simulator's clock: docs/measured.md, "The simulator").
	first   chan struct{}
	mu      sync.Mutex // guards started, closed and timer; never held across a call to Redis
	started bool
	closed  bool
	timer   *time.Timer
	beating sync.Mutex // held by a renewal in flight; stop waits for it
}

// startHeartbeat sets the process key once, synchronously, and starts its renewals. Later
// calls return at once: the first takeover Obtain of a Client pays one round trip, none after
// it. Before the key is set no lock of this Client names its process, so no waiter can take a
// live holder's lock for a key that was never written.
func (c *Client) startHeartbeat(ctx context.Context) error {
	hb := &c.hb
	if hb.running.Load() {
		return nil
	}
	select {
	case hb.first <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("locking: process key: %w", ctx.Err())
	}
	defer func() { <-hb.first }()
	hb.mu.Lock()
	done := hb.started || hb.closed
	hb.mu.Unlock()
	if done {
		return nil
	}
	if err := c.beatOnce(ctx); err != nil {
		return fmt.Errorf("locking: process key: %w", err)
	}
	hb.mu.Lock()
	closed := hb.closed
	if !closed {
		hb.started = true
		hb.timer = time.AfterFunc(c.processTTL/3, c.beat)
		hb.running.Store(true)
	}
	hb.mu.Unlock()
	if closed { // Close ran during the round trip and saw no key to delete: it goes now
		c.deleteProcessKey()
	}
	return nil
}

// beat is one renewal of the process key, on the heartbeat's timer. A failed renewal is
// retried sooner (ProcessTTL/10): the key lapses only when Redis stays unreachable for most
// of ProcessTTL.
func (c *Client) beat() {
	hb := &c.hb
	hb.beating.Lock()
	defer hb.beating.Unlock()
	hb.mu.Lock()
	closed := hb.closed
	hb.mu.Unlock()
	if closed {
		return
	}
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

// stopHeartbeat stops the renewals, waits for one in flight, and deletes the process key
// (best effort): the locks of this Client that are still held become takeover's to take.
func (c *Client) stopHeartbeat() {
	hb := &c.hb
	hb.mu.Lock()
	hb.closed = true
	started, t := hb.started, hb.timer
	hb.mu.Unlock()
	if !started {
		return
	}
	t.Stop()
	hb.beating.Lock() // a renewal in flight ends before the key is deleted
	defer hb.beating.Unlock()
	c.deleteProcessKey()
}

// deleteProcessKey deletes the process key (best effort, within one CallTimeout).
func (c *Client) deleteProcessKey() {
	ctx, cancel := context.WithTimeout(context.Background(), c.callTimeout)
	defer cancel()
	_ = c.rdb.Del(ctx, c.processKey(c.process)).Err()
}

// Process returns the Client's process id: its WithTakeover locks name it (their owner token
// is random@process in the lock hash), and its process key, c.prefix+"process:{id}", says it is
// alive. Operators match it with the storefront's start-up log to see which process holds a lock.
func (c *Client) Process() string { return c.process }
