package locking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The life of a hold, in order: newHold (the first handle, the watchdog started), reenter
// (more handles under Lock.Context), Release (one handle each; the last stops the watchdog
// and deletes the key), or lose (the watchdog found the lock gone: every open handle is
// finished with ErrLost).

// hold is one ownership of a key in Redis: one owner token and one watchdog, shared by the
// Lock handles of a re-entered lock.
type hold struct {
	c        *Client
	k        keys
	owner    string
	token    atomic.Int64 // the latest fencing token issued to the hold (NextToken draws more)
	acquired time.Time
	wd       *watchdog
	kind     *kind        // what its kind does in Redis (kind.go)
	waited   bool         // its Obtain did not take it at its first attempt (set before Obtain returns)
	renewals atomic.Int64 // renewals its watchdog made (Lock.Renewals)

	mu      sync.Mutex
	handles int            // Lock handles not yet released; the last stops the watchdog
	live    map[*Lock]bool // handles whose Done is still open
	lost    error          // set once, when the watchdog declared the lock lost
}

// newHold returns the first Lock handle of a new hold on k, of kind kd: it starts the hold's
// watchdog from sent (when the call that set the lease was sent) and calls the Acquired hook
// with the time waited since start.
func (c *Client) newHold(k keys, owner string, token int64, kd *kind, sent, start time.Time) *Lock {
	h := &hold{c: c, k: k, owner: owner, kind: kd, acquired: time.Now(), live: map[*Lock]bool{}}
	h.token.Store(token)
	h.mu.Lock()
	l := h.newHandleLocked()
	h.mu.Unlock()
	h.wd = c.newWatchdog(h)
	h.wd.start(sent)
	if f := c.hooks.Acquired; f != nil {
		f(k.name, token, time.Since(start))
	}
	return l
}

// newWatchdog returns the watchdog of h: renewals with its kind's renew, or none for a
// fixed lease.
func (c *Client) newWatchdog(h *hold) *watchdog {
	w := &watchdog{lease: c.lease, callTimeout: c.ackTimeout(), onLost: h.lose}
	if c.watchdog {
		w.renew = func(ctx context.Context) (bool, error) { return h.kind.renew(ctx, h) }
		w.onRenewed = func() {
			h.renewals.Add(1)
			if f := c.hooks.Renewed; f != nil {
				f(h.k.name)
			}
		}
	}
	return w
}

// newHandleLocked adds a Lock handle to h; h.mu is held.
func (h *hold) newHandleLocked() *Lock {
	l := &Lock{h: h, done: make(chan struct{})}
	h.handles++
	h.live[l] = true
	return l
}

// ctxKey is the context value of Lock.Context: the hold that a context carries, per Client
// and key.
type ctxKey struct {
	c   *Client
	key string
}

// heldIn returns the hold on key that ctx carries for c, or nil.
func heldIn(ctx context.Context, c *Client, key string) *hold {
	h, _ := ctx.Value(ctxKey{c, key}).(*hold)
	return h
}

// errHoldReleased is reenter's answer when every handle of the hold was released: the
// caller's context carries a finished lock (it was detached with context.WithoutCancel), and
// the key is obtained like anyone else's.
var errHoldReleased = errors.New("locking: hold released")

// reenter adds a hold to h for a caller whose context carries it (see Client.enter). It
// fails with errHoldReleased if every handle was released, and with ErrNotObtained joined
// with ErrLost if the lock was lost. A kind that counts re-entry in the process (Redlock)
// stops there; the others increment the hold count in Redis (acquire.lua, reentry "1").
//
// When the call fails after it may have run in Redis (its reply was lost), the hold count
// it may have added is taken back, without ever freeing the key; should Redis keep counting
// one hold too many anyway, the last Release drops every hold at once, so the count in Redis
// never outlives the process's handles. If the failed re-entry was the last handle (the
// others were released meanwhile), the key is deleted as by the last Release.
func (h *hold) reenter(ctx context.Context) (*Lock, error) {
	h.mu.Lock()
	if h.handles == 0 {
		h.mu.Unlock()
		return nil, errHoldReleased
	}
	if h.lost != nil {
		h.mu.Unlock()
		return nil, errors.Join(ErrNotObtained, ErrLost)
	}
	l := h.newHandleLocked()
	h.mu.Unlock()
	if h.kind.reentry == reenterLocal {
		return l, nil
	}
	cctx, cancel := context.WithTimeout(ctx, h.c.callTimeout)
	defer cancel()
	res, err := acquireScript.Run(cctx, h.c.rdb, []string{h.k.hash, h.k.fence},
		h.owner, h.c.lease.Milliseconds(), "0", "1").Int64Slice()
	if err == nil && len(res) == 2 && res[0] == 1 {
		return l, nil
	}
	// Undo the local handle; if it was the last one, the watchdog stops with it.
	h.mu.Lock()
	l.released = true
	h.finishLocked(l, ErrNotHeld, ErrNotHeld)
	h.handles--
	last := h.handles == 0
	lost := h.lost
	h.mu.Unlock()
	switch {
	case last:
		h.wd.stop()
		h.mu.Lock()
		lost = h.lost
		h.mu.Unlock()
		if err != nil && (lost == nil || !errors.Is(lost, errTaken)) {
			// The process holds the key no more: delete it, every hold, as the last
			// Release does, rather than leave it to its lease.
			h.kind.forget(ctx, h)
		}
		switch {
		case lost == nil && err != nil:
			if f := h.c.hooks.Released; f != nil {
				f(h.k.name, time.Since(h.acquired))
			}
		case lost == nil: // found lost only now: the holder still hears of it, as a loss
			h.lose(fmt.Errorf("%w: %w", ErrLost, errTaken))
		}
	case err != nil && maybeExecuted(err) && lost == nil:
		// The increment may have run: take it back (an inner release, which never frees
		// the key, so taking back an increment that did not run is harmless).
		cctx, cancel := h.c.bestEffort(ctx)
		_ = releaseScript.Run(cctx, h.c.rdb, []string{h.k.hash}, h.owner, h.k.channel, "0").Err()
		cancel()
	}
	if err != nil {
		if cerr := ended(ctx); cerr != nil {
			return nil, errors.Join(ErrNotObtained, cerr)
		}
		return nil, fmt.Errorf("locking: re-enter %q: %w", h.k.name, err)
	}
	return nil, errors.Join(ErrNotObtained, ErrLost)
}

// Release gives the lock up. The last release of a lock (the last of its handles still
// held in this process, for a re-entered one) stops its watchdog and waits for it, then
// deletes the key if it is still ours, whatever hold count Redis has (the process's count
// of handles is the authority: a re-entry whose reply was lost may have left Redis counting
// one more), and wakes the waiters; an inner release only decrements the hold count, and
// never frees the key. Done is closed and the contexts from Context are cancelled before
// Redis is called.
//
// It returns ErrNotHeld if this Lock was already released, was lost, or is found no longer
// ours in Redis, and for a nil Lock; any other error is a Redis failure (the lock then
// expires at the end of its lease). The Redis call always gets CallTimeout from the moment
// it is made: ctx's deadline and cancellation neither shorten it below that nor make Release
// skip the call, so the lock's own (cancelled) context may be passed, and so may a request
// context that already timed out (defer l.Release(reqCtx) still deletes the key rather than
// leave it, unwatched, until its lease ends). Only ctx's values are used.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil || l.h == nil {
		return ErrNotHeld
	}
	h := l.h
	h.mu.Lock()
	if l.released {
		h.mu.Unlock()
		return ErrNotHeld
	}
	l.released = true
	h.finishLocked(l, ErrNotHeld, ErrNotHeld)
	lost := h.lost
	h.handles--
	last := h.handles == 0
	h.mu.Unlock()

	if last {
		h.wd.stop()
		h.mu.Lock()
		lost = h.lost // the watchdog may have declared the loss meanwhile
		h.mu.Unlock()
	}
	if lost != nil {
		if last && !errors.Is(lost, errTaken) {
			// Redis was unreachable or the fixed lease ran out: the key may still be ours.
			// Delete it so waiters need not wait for its expiry.
			h.kind.forget(ctx, h)
		}
		return ErrNotHeld
	}
	cctx, cancel := h.c.bestEffort(ctx)
	defer cancel()
	left, err := h.kind.release(cctx, h, last)
	if err != nil && last && h.kind.debt != nil {
		// The key may stay ours: paid before the next attempt on it, or when a breaker closes.
		h.c.debts.owe(h.k, h.owner, err, h.kind.debt(h))
	}
	if err == nil && left < 0 {
		if last { // found lost only now: the holder still hears of it once, as a loss
			h.lose(fmt.Errorf("%w: %w", ErrLost, errTaken))
		}
		return ErrNotHeld
	}
	if last {
		// Also after a Redis failure: this process no longer holds the lock (Redis keeps
		// the key until its lease ends).
		if f := h.c.hooks.Released; f != nil {
			f(h.k.name, time.Since(h.acquired))
		}
	}
	if err != nil {
		return fmt.Errorf("locking: release %q: %w", h.k.name, err)
	}
	return nil
}

// lose is the watchdog's onLost: the Lost hook runs, then every open handle learns of the
// loss (Done closed, contexts cancelled). A Release in between returns ErrNotHeld.
func (h *hold) lose(err error) {
	h.mu.Lock()
	if h.lost != nil {
		h.mu.Unlock()
		return
	}
	h.lost = err
	h.mu.Unlock()
	h.c.log.Warn("locking: lock lost", "key", h.k.name, "token", h.token.Load(), "err", err)
	if f := h.c.hooks.Lost; f != nil {
		f(h.k.name, err)
	}
	h.mu.Lock()
	for l := range h.live {
		h.finishLocked(l, ErrLost, err)
	}
	h.mu.Unlock()
}

// finishLocked closes l's Done and cancels its contexts, once.
func (h *hold) finishLocked(l *Lock, err, cause error) {
	if l.err != nil {
		return
	}
	l.err, l.cause = err, cause
	l.contexts.cancelAll(cause) // before Done, so a closed Done implies cancelled contexts
	close(l.done)
	delete(h.live, l)
}
