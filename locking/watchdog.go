package locking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog keeps one lease alive. It is the seam that the rest of the lock family reuses
// (fair lock, Redlock, semaphore): it knows nothing of keys or scripts, only a renew function,
// the lease, and what to call on renewal and on loss.
//
// Every interval (default lease/3) it calls renew, bounded by callTimeout and by the loss
// deadline. renew answers (true, nil) when the lease was extended, (false, nil) when the
// lease is gone or owned by another (loss at once), or an error when Redis could not be
// asked; then the watchdog retries until the loss deadline: lease − drift − callTimeout
// after the last successful renewal was sent, so the holder learns of the loss before the
// lease can expire in Redis. A nil renew (fixed lease, no watchdog) only waits for that
// deadline.
//
// It runs on a time.AfterFunc timer, so a short hold costs no goroutine: a goroutine exists
// only while a renewal runs. It is owned by its creator: stop ends it and waits for a running
// renewal (and onLost) to finish; nothing of it runs after stop returns.
type watchdog struct {
	renew       func(ctx context.Context) (bool, error)
	lease       time.Duration
	interval    time.Duration
	callTimeout time.Duration
	onRenewed   func()
	onLost      func(err error) // called at most once, from a renewal goroutine

	lastSent atomic.Int64 // unix ns when the last successful renewal was sent (for tests)

	ctx    context.Context // cancelled by stop; bounds every renewal too
	cancel context.CancelFunc
	done   chan struct{} // closed when the watchdog has ended (stopped or lost)

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	ended   bool
	lossAt  time.Time // guarded by mu only between ticks; ticks never overlap
	lastErr error
}

// Causes joined to ErrLost.
var (
	errUnreachable = errors.New("renewals failed until the lease could have expired")
	errTaken       = errors.New("renewal found the lock gone or taken by another")
	errLeaseOver   = errors.New("the fixed lease ran out")
)

// start arms the watchdog from sent, the time the call that set the lease was sent.
func (w *watchdog) start(sent time.Time) {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.done = make(chan struct{})
	if w.interval <= 0 {
		w.interval = w.lease / 3
	}
	w.lastSent.Store(sent.UnixNano())
	w.lossAt = w.deadline(sent)
	next := w.interval
	if w.renew == nil { // fixed lease: only the deadline
		next = time.Until(w.lossAt)
	}
	w.mu.Lock()
	w.timer = time.AfterFunc(max(min(next, time.Until(w.lossAt)), 0), w.tick)
	w.mu.Unlock()
}

// stop ends the watchdog and waits until nothing of it runs. Safe to call more than once and
// after the watchdog ended by itself.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	w.cancel()                      // cuts a running renewal short
	if !w.ended && w.timer.Stop() { // no tick pending or running
		w.endLocked()
	}
	w.mu.Unlock()
	<-w.done
}

func (w *watchdog) endLocked() {
	if !w.ended {
		w.ended = true
		w.cancel()
		close(w.done)
	}
}

func (w *watchdog) deadline(sent time.Time) time.Time {
	return sent.Add(w.lease - drift(w.lease) - w.callTimeout)
}

// tick is one timer expiry: a renewal, or the declaration of the loss.
func (w *watchdog) tick() {
	w.mu.Lock()
	if w.stopped {
		w.endLocked()
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()

	next, lost := w.step()
	if lost != nil {
		w.onLost(lost) // before done closes: stop waits for the hook
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if lost != nil || w.stopped {
		w.endLocked()
		return
	}
	w.timer.Reset(next)
}

// step runs one renewal and returns the time until the next, or the loss.
func (w *watchdog) step() (time.Duration, error) {
	now := time.Now()
	if !now.Before(w.lossAt) || w.renew == nil {
		if w.lastErr != nil {
			return 0, fmt.Errorf("%w: %w (last: %w)", ErrLost, errUnreachable, w.lastErr)
		}
		return 0, fmt.Errorf("%w: %w", ErrLost, errLeaseOver)
	}
	ctx, cancel := context.WithDeadline(w.ctx, now.Add(min(w.callTimeout, w.lossAt.Sub(now))))
	held, err := w.renew(ctx)
	cancel()
	next := w.interval
	switch {
	case err == nil && held:
		w.lastErr = nil
		w.lossAt = w.deadline(now)
		w.lastSent.Store(now.UnixNano())
		if w.onRenewed != nil {
			w.onRenewed()
		}
	case err == nil:
		return 0, fmt.Errorf("%w: %w", ErrLost, errTaken)
	default:
		if w.ctx.Err() != nil { // cut short by stop
			return 0, nil
		}
		w.lastErr = err
		// Retry soon, but not in a tight loop on "connection refused".
		next = min(w.interval, max(w.callTimeout/4, 10*time.Millisecond))
	}
	return max(min(next, time.Until(w.lossAt)), 0), nil
}
