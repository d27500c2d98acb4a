package locking

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
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
// one process with plain contexts exclude each other like two processes.
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
	if key == "" {
		return nil, ErrEmptyKey
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	if c.notify.isClosed() {
		return nil, ErrClosed
	}
	if h := heldIn(ctx, c, key); h != nil {
		l, err := h.reenter(ctx)
		if err != errHoldReleased {
			return l, err
		}
		// The lock ctx carries was released (ctx was detached with context.WithoutCancel):
		// obtain the key like anyone else.
	}
	cfg := obtainConfig{wait: c.wait}
	for _, o := range opts {
		o(&cfg)
	}
	if !wait {
		cfg.wait = 0
	}
	k := c.keysFor(key)
	owner := newOwner()
	start := time.Now()
	var lock *Lock
	attempt := func(ctx context.Context) (bool, time.Duration, error) {
		l, ttl, err := c.acquire(ctx, k, owner, cfg.floor, start)
		lock = l
		return l != nil, ttl, err
	}
	// Try at once, unless waiters of this Client are queued for the key: then queue behind
	// them (waitLoop), so that they are not overtaken. TryObtain always tries.
	if cfg.wait == 0 || !c.notify.queued(k.channel) {
		ok, _, err := attempt(ctx)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return lock, nil
		case cfg.wait == 0:
			return nil, ErrNotObtained
		}
	}
	if err := c.waitLoop(ctx, k.channel, cfg.wait, attempt); err != nil {
		return nil, err
	}
	return lock, nil
}

// acquire makes one attempt. It returns the Lock when taken, or the remaining lease of the
// holder when not.
func (c *Client) acquire(ctx context.Context, k keys, owner string, floor int64, start time.Time) (*Lock, time.Duration, error) {
	if err := ctx.Err(); err != nil { // nothing sent: nothing to clean up
		return nil, 0, errors.Join(ErrNotObtained, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	sent := time.Now()
	res, err := acquireScript.Run(cctx, c.rdb, []string{k.hash, k.fence},
		owner, c.lease.Milliseconds(), strconv.FormatInt(floor, 10), "0").Int64Slice()
	if err != nil {
		if maybeExecuted(err) { // the script may have run: do not leave the key behind
			c.forget(ctx, k, owner)
		}
		if err := ended(ctx); err != nil {
			return nil, 0, errors.Join(ErrNotObtained, err)
		}
		return nil, 0, fmt.Errorf("locking: obtain %q: %w", k.name, err)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("locking: obtain %q: unexpected reply %v", k.name, res)
	}
	if res[0] != 1 {
		if res[1] == -1 { // a lock hash without expiry (set by hand?): do not poll it fast
			return nil, c.lease, nil
		}
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	return c.newHold(k, owner, res[1], nil, sent, start), 0, nil
}

// newWatchdog returns the watchdog of h: renewals with renew.lua, or none for a fixed lease.
func (c *Client) newWatchdog(h *hold) *watchdog {
	w := &watchdog{lease: c.lease, callTimeout: c.callTimeout, onLost: h.lose}
	if c.watchdog {
		w.renew = func(ctx context.Context) (bool, error) {
			n, err := renewScript.Run(ctx, c.rdb, []string{h.k.hash}, h.owner, c.lease.Milliseconds()).Int64()
			return n == 1, err
		}
		w.onRenewed = func() {
			if f := c.hooks.Renewed; f != nil {
				f(h.k.name)
			}
		}
	}
	return w
}

// maybeExecuted reports whether a failed call may have run in Redis anyway: it timed out or
// was cancelled, or the connection failed (EOF, reset, any network error) after the
// command may have been written. Only errors that prove nothing ran are excluded: a reply
// from Redis (an error reply answers the call), and failing to connect at all.
func maybeExecuted(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false // never connected: nothing was sent
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// forget deletes the lock if owner still holds it: after an attempt whose reply was lost
// (it may have taken the lock), or after a loss that left the key in Redis. Best effort,
// bounded by CallTimeout only: ctx may have ended, which is what made the reply go missing.
func (c *Client) forget(ctx context.Context, k keys, owner string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
	defer cancel()
	_ = releaseScript.Run(cctx, c.rdb, []string{k.hash}, owner, k.channel, "1").Err()
}

// errHoldReleased is reenter's answer when every handle of the hold was released: the
// caller's context carries a finished lock (it was detached with context.WithoutCancel), and
// the key is obtained like anyone else's.
var errHoldReleased = errors.New("locking: hold released")

// reenter adds a hold to h for a caller whose context carries it. It fails with
// errHoldReleased if every handle was released, and with ErrNotObtained joined with ErrLost
// if the lock was lost.
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
			if h.ops != nil && h.ops.forget != nil {
				h.ops.forget(ctx, h)
			} else {
				h.c.forget(ctx, h.k, h.owner)
			}
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

// ended returns ctx's error, or context.DeadlineExceeded once ctx's deadline has passed even
// though ctx's own timer has not fired yet: go-redis sets the connection's deadline from ctx,
// and that network timeout may be reported first. A call that failed because the caller's
// time ran out then reads as ErrNotObtained, not as a Redis failure.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
