package locking

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis call of this package is bounded by CallTimeout. When it fails, it may still have
// run in Redis (only its reply went missing): these helpers decide whether, undo it, and say
// whether the caller's context or Redis was the cause.

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

// bestEffort bounds a clean-up call by CallTimeout only: ctx may have ended, which is often
// why the clean-up is needed. An open breaker (Breakers) refuses it at once, as every call:
// the caller owes it then (debts.go).
func (c *Client) bestEffort(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
}

// attemptFailed maps the error of an attempt's Redis call, made under cctx and sent at sent:
// when the call may have run anyway, cleanup undoes it (best effort); an ended ctx gives
// ErrNotObtained joined with its error, and so does a call whose deadline passed while this
// process was stopped (stoppedThrough); anything else is a Redis error naming what failed.
func (c *Client) attemptFailed(ctx, cctx context.Context, sent time.Time, err error, what string, cleanup func(context.Context)) error {
	if maybeExecuted(err) {
		bctx, cancel := c.bestEffort(ctx)
		cleanup(bctx)
		cancel()
	}
	if err := ended(ctx); err != nil {
		return errors.Join(ErrNotObtained, err)
	}
	if stoppedThrough(cctx, sent, err) {
		return errors.Join(ErrNotObtained, errStopped)
	}
	return fmt.Errorf("locking: %s: %w", what, err)
}

// errStopped joins ErrNotObtained for an attempt whose call failed because this process was
// stopped past its deadline (a GC or VM pause): the wait for the lock ended, Redis did not
// fail (a storefront answers lock_timeout, not unavailable).
var errStopped = errors.New("locking: the process was stopped past the call's deadline")

// stoppedThrough reports whether a call under cctx, sent at sent, failed with err because its
// deadline passed while the process was stopped (pausedThrough), not because of Redis.
func stoppedThrough(cctx context.Context, sent time.Time, err error) bool {
	var re redis.Error
	return err != nil && !errors.As(err, &re) && !errors.Is(err, ErrBreakerOpen) && pausedThrough(cctx, sent)
}
