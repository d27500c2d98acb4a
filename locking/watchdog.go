package locking

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// watchdog keeps one lease alive. It is the seam that the rest of the lock family reuses
// (fair lock, Redlock, semaphore): it knows nothing of keys or scripts, only a renew function,
// the lease, and what to call on renewal and on loss.
//
// Every interval it calls renew, bounded by callTimeout and by the loss deadline. renew
// answers (true, nil) when the lease was extended, (false, nil) when the lease is gone or
// owned by another (loss at once), or an error when Redis could not be asked; then the
// watchdog retries until the loss deadline: lease − drift − callTimeout after the last
// successful renewal was sent, so the holder learns of the loss before the lease can expire
// in Redis. A nil renew (fixed lease, no watchdog) only waits for that deadline.
//
// The goroutine is owned by the watchdog's creator: stop ends it and waits for it.
type watchdog struct {
	renew       func(ctx context.Context) (bool, error)
	lease       time.Duration
	interval    time.Duration
	callTimeout time.Duration
	onRenewed   func()
	onLost      func(err error) // called at most once, from the watchdog goroutine

	lastSent atomic.Int64 // unix ns when the last successful renewal was sent (for tests)

	ctx  context.Context // cancelled by stop; bounds every renewal too
	quit context.CancelFunc
	done chan struct{}
}

// Causes joined to ErrLost.
var (
	errUnreachable = errors.New("renewals failed until the lease could have expired")
	errTaken       = errors.New("renewal found the lock gone or taken by another")
	errLeaseOver   = errors.New("the fixed lease ran out")
)

// start runs the watchdog from sent, the time the call that set the lease was sent.
func (w *watchdog) start(sent time.Time) {
	w.lastSent.Store(sent.UnixNano())
	w.ctx, w.quit = context.WithCancel(context.Background())
	w.done = make(chan struct{})
	if w.interval <= 0 {
		w.interval = w.lease / 3
	}
	go w.run(sent)
}

// stop ends the watchdog and waits for its goroutine. Safe to call more than once and after
// the watchdog ended by itself.
func (w *watchdog) stop() {
	w.quit()
	<-w.done
}

func (w *watchdog) deadline(sent time.Time) time.Time {
	return sent.Add(w.lease - drift(w.lease) - w.callTimeout)
}

func (w *watchdog) run(sent time.Time) {
	defer close(w.done)
	lossAt := w.deadline(sent)
	next := w.interval
	if w.renew == nil { // fixed lease: only the deadline
		next = time.Until(lossAt)
	}
	timer := time.NewTimer(next)
	defer timer.Stop()
	var lastErr error
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		if !now.Before(lossAt) || w.renew == nil {
			if lastErr != nil {
				w.onLost(fmt.Errorf("%w: %w (last: %w)", ErrLost, errUnreachable, lastErr))
			} else {
				w.onLost(fmt.Errorf("%w: %w", ErrLost, errLeaseOver))
			}
			return
		}
		held, err := w.call(now, lossAt)
		switch {
		case err == nil && held:
			lastErr = nil
			lossAt = w.deadline(now)
			w.lastSent.Store(now.UnixNano())
			next = w.interval
			if w.onRenewed != nil {
				w.onRenewed()
			}
		case err == nil:
			w.onLost(fmt.Errorf("%w: %w", ErrLost, errTaken))
			return
		default:
			if w.ctx.Err() != nil { // the call was cut short by stop
				return
			}
			lastErr = err
			// Retry soon, but not in a tight loop on "connection refused".
			next = min(w.interval, max(w.callTimeout/4, 10*time.Millisecond))
		}
		next = max(min(next, time.Until(lossAt)), 0)
		timer.Reset(next)
	}
}

// call runs one renewal bounded by callTimeout, the loss deadline, and stop.
func (w *watchdog) call(now, lossAt time.Time) (bool, error) {
	ctx, cancel := context.WithDeadline(w.ctx, now.Add(min(w.callTimeout, lossAt.Sub(now))))
	defer cancel()
	return w.renew(ctx)
}
