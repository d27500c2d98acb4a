package locking

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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
			if h.ops != nil {
				h.ops.forget(ctx, h)
			} else {
				h.c.forget(ctx, h.k, h.owner)
			}
		}
		return ErrNotHeld
	}
	cctx, cancel := h.c.bestEffort(ctx)
	defer cancel()
	var left int64
	var err error
	if h.ops != nil {
		left, err = h.ops.release(cctx, h, last)
	} else {
		left, err = releaseScript.Run(cctx, h.c.rdb, []string{h.k.hash}, h.owner, h.k.channel, flag(last)).Int64()
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
