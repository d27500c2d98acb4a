package locking

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// kindOps are the Redis calls of a lock kind other than the core lock (fair lock, Redlock,
// semaphore), so that every kind shares hold, Lock, Release, the hooks and the watchdog. A
// nil field means the core lock's script for that call.
type kindOps struct {
	// release gives up one hold (last: the final handle, see Lock.Release) and returns the
	// holds left in Redis (0: deleted) or -1 when the lock is not ours any more.
	release func(ctx context.Context, h *hold, last bool) (int64, error)
	// forget deletes every hold of h if still ours, best effort, after a loss; ctx may have
	// ended (the call is bounded by CallTimeout only).
	forget func(ctx context.Context, h *hold)
	// ttl returns the remaining lease, ErrNotHeld when not ours, or a Redis error.
	ttl func(ctx context.Context, h *hold) (time.Duration, error)
	// renew is the watchdog's renewal (see watchdog.renew).
	renew func(ctx context.Context, h *hold) (bool, error)
}

// familyConfig holds the Options of the lock family: spin mode and the fair-lock queue.
type familyConfig struct {
	spin         *SpinOptions // nil: pub/sub waiting; defaults filled in
	queueTimeout time.Duration
}

// DefaultQueueTimeout is the default of Options.QueueTimeout.
const DefaultQueueTimeout = 5 * time.Second

func (o *Options) family() familyConfig {
	var f familyConfig
	if o == nil {
		return f
	}
	if o.Spin != nil {
		s := o.Spin.withDefaults()
		f.spin = &s
	}
	f.queueTimeout = o.QueueTimeout
	return f
}

// queueTimeout is the fair-lock waiter timeout: Options.QueueTimeout or its default, at least
// three call timeouts so that a live waiter always refreshes its place in time.
func (c *Client) queueTimeout() time.Duration {
	d := c.family.queueTimeout
	if d <= 0 {
		d = DefaultQueueTimeout
	}
	return max(d, 3*c.callTimeout)
}

// newHold returns the first Lock handle of a new hold on k: it starts the hold's watchdog
// from sent (when the call that set the lease was sent) and calls the Acquired hook with the
// time waited since start. ops is nil for the core lock.
func (c *Client) newHold(k keys, owner string, token int64, ops *kindOps, sent, start time.Time) *Lock {
	h := &hold{c: c, k: k, owner: owner, token: token, ops: ops, acquired: time.Now(), live: map[*Lock]bool{}}
	h.mu.Lock()
	l := h.newHandleLocked()
	h.mu.Unlock()
	h.wd = c.newWatchdog(h)
	if ops != nil && ops.renew != nil && h.wd.renew != nil {
		h.wd.renew = func(ctx context.Context) (bool, error) { return ops.renew(ctx, h) }
	}
	h.wd.start(sent)
	if f := c.hooks.Acquired; f != nil {
		f(k.name, token, time.Since(start))
	}
	return l
}

// reenterLocal adds a handle to h without calling Redis, for the kinds that count re-entry
// in the process (Redlock). It fails as hold.reenter does: errHoldReleased when every
// handle was released (the caller then obtains the key anew), ErrNotObtained joined with
// ErrLost when the lock was lost.
func (h *hold) reenterLocal() (*Lock, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.handles == 0 {
		return nil, errHoldReleased
	}
	if h.lost != nil {
		return nil, errors.Join(ErrNotObtained, ErrLost)
	}
	return h.newHandleLocked(), nil
}

// bestEffort bounds a clean-up call by CallTimeout only: ctx may have ended, which is often
// why the clean-up is needed.
func (c *Client) bestEffort(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
}

// obtainConfigFor applies opts to the Client's defaults; wait false makes one attempt.
func (c *Client) obtainConfigFor(wait bool, opts []ObtainOption) obtainConfig {
	cfg := obtainConfig{wait: c.wait}
	for _, o := range opts {
		o(&cfg)
	}
	if !wait {
		cfg.wait = 0
	}
	return cfg
}

// obtainKind is Obtain for the other kinds: it checks ctx and Close, makes one attempt and,
// unless limit is zero, waits with waitLoop on channel (spinWait in spin mode) until an
// attempt succeeds. attempt returns the Lock when taken, or how long at most to sleep before
// the next attempt (0: no hint), or an error that ends the wait. The errors are Obtain's.
func (c *Client) obtainKind(ctx context.Context, channel string, limit time.Duration,
	attempt func(context.Context) (*Lock, time.Duration, error)) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	if c.notify.isClosed() {
		return nil, ErrClosed
	}
	var lock *Lock
	try := func(ctx context.Context) (bool, time.Duration, error) {
		l, hint, err := attempt(ctx)
		lock = l
		return l != nil, hint, err
	}
	ok, _, err := try(ctx)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return lock, nil
	case limit == 0:
		return nil, ErrNotObtained
	}
	if err := c.waitLoop(ctx, channel, limit, try); err != nil {
		return nil, err
	}
	return lock, nil
}

// attemptFailed maps the error of an attempt's Redis call: when the call may have run
// anyway, cleanup undoes it (best effort); an ended ctx gives ErrNotObtained joined with its
// error, anything else a Redis error naming what failed.
func (c *Client) attemptFailed(ctx context.Context, err error, what string, cleanup func(context.Context)) error {
	if maybeExecuted(err) {
		cctx, cancel := c.bestEffort(ctx)
		cleanup(cctx)
		cancel()
	}
	if err := ended(ctx); err != nil {
		return errors.Join(ErrNotObtained, err)
	}
	return fmt.Errorf("locking: %s: %w", what, err)
}
