package locking

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Obtain returns the lock on key, waiting while another holds it: it tries once, then waits
// for the key's release message (or, should a message be missed, for the remaining lease of
// the failed attempt) and tries again, until it holds the lock, ctx ends, or the wait limit
// (Options.Wait, WithWait) passes.
//
// Under a context that carries a Lock on the same key from this Client (Lock.Context, or a
// context derived from it), Obtain re-enters that lock instead: it increments its hold count,
// keeps its tokens, and returns a new Lock handle to release separately; the key is deleted
// only when the last handle is released. Other contexts never re-enter: two goroutines of
// one process with plain contexts exclude each other like two processes. A Multi is not
// re-entered: under a context from Multi.Context whose Multi holds key, Obtain fails at once
// (ErrNotObtained) instead of waiting for its own key.
//
// It returns ErrNotObtained when the wait ended (joined with ctx.Err() when ctx ended it, and
// with ErrLost when a re-entry finds its lock lost), ErrClosed after Client.Close,
// ErrEmptyKey for the key "", and any other error when Redis failed: Obtain does not retry
// Redis errors.
func (c *Client) Obtain(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return c.obtain(ctx, key, true, opts)
}

// TryObtain is Obtain without waiting: one attempt. It returns ErrNotObtained if another
// holds the lock, ErrClosed after Close, ErrEmptyKey for the key "", and a Redis error
// otherwise.
func (c *Client) TryObtain(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return c.obtain(ctx, key, false, opts)
}

func (c *Client) obtain(ctx context.Context, key string, wait bool, opts []ObtainOption) (*Lock, error) {
	if l, done, err := c.enter(ctx, key, c.core); done {
		return l, err
	}
	cfg := c.obtainConfigFor(wait, opts)
	if cfg.takeover {
		if err := c.startHeartbeat(ctx); err != nil {
			return nil, err
		}
	}
	k := c.keysFor(key)
	owner := c.ownerFor(cfg.takeover)
	tk := c.newTakeover(cfg.takeover && cfg.wait != 0, true) // a try runs acquire.lua: no takeover
	start := time.Now()
	var short shortfall
	waiting := false // an attempt found the lock taken and recorded this Obtain as waiting
	l, err := c.obtainKind(ctx, c.core, k.channel, cfg.wait, func(ctx context.Context) (*Lock, time.Duration, error) {
		dead, _ := tk.dead(ctx, k, false)
		l, hint, err := c.acquire(ctx, k, owner, cfg.floor, start, cfg.wait != 0, dead)
		if short.note(err) {
			return nil, hint, nil
		}
		if l == nil && err == nil {
			waiting, hint = true, tk.failed(hint)
		}
		return l, hint, err
	})
	if err != nil && waiting {
		c.unwait(ctx, k, owner)
	}
	return l, short.result(err)
}

// unwait removes owner from k's waiting set (acquire_waiting.lua) once its Obtain gave up, best
// effort: an entry left behind lapses on its own, a little after the lease it saw. It is not a
// clean-up call: an open breaker refuses it at once, so that a caller is not kept waiting on a
// node known to hang for what would tidy itself.
func (c *Client) unwait(ctx context.Context, k keys, owner string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
	defer cancel()
	_ = c.rdb.ZRem(cctx, k.waiting(), owner).Err()
}

// interestMargin is how long past the holder's remaining lease a waiter's entry in the waiting
// set lasts (acquire_waiting.lua): the time its next attempt, due then, needs to reach Redis.
func (c *Client) interestMargin() time.Duration { return min(c.lease, time.Second) }

// enter is the preamble of every kind's Obtain. It refuses the key "" (ErrEmptyKey) and
// whatever the kind refuses, then an ended ctx (ErrNotObtained joined with ctx.Err()) and a
// closed Client (ErrClosed). Under a context that carries a hold of this Client on key
// (Lock.Context), a kind that re-enters re-enters that hold (hold.reenter); under one that
// carries a Multi of this Client holding key (Multi.Context), it fails at once rather than
// wait for its own key (multiIn). done reports
// that the call is over with l and err; otherwise the caller obtains the key anew, which
// includes a context carrying a hold whose handles were all released (a context detached
// with context.WithoutCancel).
func (c *Client) enter(ctx context.Context, key string, kd *kind) (l *Lock, done bool, err error) {
	switch {
	case key == "":
		return nil, true, ErrEmptyKey
	case kd.refuse != nil:
		return nil, true, kd.refuse
	case ctx.Err() != nil:
		return nil, true, errors.Join(ErrNotObtained, ctx.Err())
	case c.notify.isClosed():
		return nil, true, ErrClosed
	}
	if kd.reentry == reenterNever {
		return nil, false, nil
	}
	if err := multiIn(ctx, c, key); err != nil { // a Multi's keys are not re-entered (multi_obtain.go)
		return nil, true, err
	}
	if h := heldIn(ctx, c, key); h != nil {
		l, err := h.reenter(ctx)
		if err != errHoldReleased {
			return l, true, err
		}
	}
	return nil, false, nil
}

// obtainKind is the obtaining half shared by every kind, after enter: one attempt, then,
// unless limit is zero, waitLoop on channel (spinWait in spin mode) until an attempt
// succeeds. A kind that queues behind (the core lock) skips the first attempt when this
// Client already has waiters on channel. attempt returns the Lock when taken, or how long at
// most to sleep before the next attempt (0: no hint), or an error that ends the wait. The
// errors are Obtain's.
func (c *Client) obtainKind(ctx context.Context, kd *kind, channel string, limit time.Duration,
	attempt func(context.Context) (*Lock, time.Duration, error)) (*Lock, error) {
	var lock *Lock
	try := func(ctx context.Context) (bool, time.Duration, error) {
		l, hint, err := attempt(ctx)
		lock = l
		return l != nil, hint, err
	}
	// Try at once, unless waiters of this Client are queued for the key and the kind queues
	// behind them (waitLoop). TryObtain always tries.
	var hint time.Duration // the first attempt's: how long at most until the lock is free
	if limit == 0 || !kd.queueBehind || !c.notify.queued(channel) {
		var ok bool
		var err error
		ok, hint, err = try(ctx)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return lock, nil
		case limit == 0:
			return nil, ErrNotObtained
		}
	}
	if err := c.waitLoop(ctx, channel, limit, hint, try); err != nil {
		return nil, err
	}
	lock.h.waited = true
	return lock, nil
}

// acquire makes one attempt of the core lock (acquire.lua). It returns the Lock when taken, or the remaining lease of the
// holder when not.
func (c *Client) acquire(ctx context.Context, k keys, owner string, floor int64, start time.Time, wait bool, dead string) (*Lock, time.Duration, error) {
	token, sent, hint, err := c.acquireKey(ctx, k, owner, floor, wait, dead)
	if err != nil || token == 0 {
		return nil, hint, err
	}
	return c.newHold(k, owner, token, c.core, sent, start), 0, nil
}

// acquireKey is the Redis half of acquire, shared with ObtainMany (multi_obtain.go): one run of
// acquire.lua for owner on k. It returns the fencing token (> 0) and when the call was sent
// when the key was taken, or token 0 and the holder's remaining lease (at most this long
// before the next attempt) when it was not. A call that may have run in Redis but failed is
// cleaned up (forget), and its error reads as ErrNotObtained when ctx ended it. Under
// Options.Replicas a key taken is WAITed for (ackAcquired): too few acknowledgements give it
// back and return token 0, a short sleep and an error wrapping ErrNotReplicated, which the
// caller records (shortfall) and does not end its wait with.
//
// With wait (an Obtain that waits, not TryObtain), the attempt runs acquire_waiting.lua: a failed
// one records owner as waiting for k, a successful one removes it (Lock.Waiters). With dead, a
// holder whose process a takeover check found dead (takeover.go), it runs takeover.lua, which
// evicts that holder first if it still holds k.
func (c *Client) acquireKey(ctx context.Context, k keys, owner string, floor int64, wait bool, dead string) (token int64, sent time.Time, hint time.Duration, err error) {
	if err := ctx.Err(); err != nil { // nothing sent: nothing to clean up
		return 0, sent, 0, errors.Join(ErrNotObtained, err)
	}
	c.settle(ctx, k)                            // clean-ups of k that did not reach Redis (debts.go)
	sc, conn, err := c.scripterFor(ctx, k.hash) // Options.Replicas: one connection, for the WAIT
	if err != nil {
		return 0, sent, 0, fmt.Errorf("locking: obtain %q: %w", k.name, err)
	}
	defer closeConn(conn)
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	sent = time.Now()
	script, ks, args := acquireScript, []string{k.hash, k.fence, k.gone(owner)},
		[]any{owner, c.lease.Milliseconds(), strconv.FormatInt(floor, 10), "0"}
	if wait {
		script, ks, args = acquireWaitingScript, append(ks, k.waiting()), append(args, c.interestMargin().Milliseconds())
		if dead != "" {
			script, args = takeoverScript, append(args, dead)
		}
	}
	res, err := script.Run(cctx, sc, ks, args...).Int64Slice()
	if err != nil {
		c.reloadOnMoved(err)    // Options.Replicas on a Cluster: a slot that moved
		if maybeExecuted(err) { // the script may have run: do not leave the key behind
			c.forget(ctx, k, owner)
		}
		if err := ended(ctx); err != nil {
			return 0, sent, 0, errors.Join(ErrNotObtained, err)
		}
		if stoppedThrough(cctx, sent, err) { // this process was stopped, not Redis (calls.go)
			return 0, sent, 0, errors.Join(ErrNotObtained, errStopped)
		}
		return 0, sent, 0, fmt.Errorf("locking: obtain %q: %w", k.name, err)
	}
	if len(res) != 2 {
		return 0, sent, 0, fmt.Errorf("locking: obtain %q: unexpected reply %v", k.name, res)
	}
	if res[0] == -2 {
		return 0, sent, 0, errors.Join(ErrNotObtained, errAbandoned)
	}
	if res[0] != 1 {
		if res[1] == -1 { // a lock hash without expiry (set by hand?): do not poll it fast
			return 0, sent, c.lease, nil
		}
		// PTTL 0: under a millisecond left. A hint of 0 would mean "none" (a full backoff).
		return 0, sent, time.Duration(max(res[1], 1)) * time.Millisecond, nil
	}
	err = c.ackAcquired(ctx, conn, k.name, func(ctx context.Context) error {
		_, err := c.fairScript(ctx, k, owner, true, false, false) // and wake a fair waiter
		return err
	}, func(ctx context.Context) { c.forget(ctx, k, owner) })
	if err != nil { // ErrNotReplicated: given back, try again; anything else ends the wait
		return 0, sent, c.retryAfterShortfall(), err
	}
	return res[1], sent, 0, nil
}
