package inventory

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Spent is what one purchase cost before it was answered: the simulated work actually spent
// (cut short when its context ended, summed over retries) and the time it waited for the
// item's lock or for a coalesced hold to admit it. A purchase refused after its work wasted it.
// The demo's Server-Timing header shows it.
type Spent struct {
	Work time.Duration
	Lock time.Duration
}

// SpentOf returns what the purchase that failed with err spent; zero for an error that did not
// come from Service.Purchase.
func SpentOf(err error) Spent {
	var se *spentError
	if errors.As(err, &se) {
		return se.spent
	}
	return Spent{}
}

// spentError is an error of Service.Purchase with the purchase's Spent attached; it is the
// error it wraps in every other respect.
type spentError struct {
	err   error
	spent Spent
}

func (e *spentError) Error() string { return e.err.Error() }
func (e *spentError) Unwrap() error { return e.err }

// spent accumulates a purchase's Spent. Its fields are atomic: a coalesced purchase's work
// runs on a goroutine of the item's worker, which may still be finishing when a buyer whose
// context ended has already been answered.
type spent struct {
	work, lock atomic.Int64
}

func (s *spent) addWork(d time.Duration) {
	if s != nil && d > 0 {
		s.work.Add(int64(d))
	}
}

func (s *spent) addLock(d time.Duration) {
	if s != nil && d > 0 {
		s.lock.Add(int64(d))
	}
}

func (s *spent) get() Spent {
	if s == nil {
		return Spent{}
	}
	return Spent{Work: time.Duration(s.work.Load()), Lock: time.Duration(s.lock.Load())}
}

// work spends p's simulated work under ctx and records the time actually spent. Sleep is called
// even for no work (sleepCtx returns at once): tests use it as the point before the write.
func (d deps) work(ctx context.Context, p purchase) error {
	if p.work <= 0 {
		return d.sleep(ctx, 0)
	}
	start := time.Now()
	err := d.sleep(ctx, p.work)
	// At most the work asked for: a process stopped during it (SIGSTOP, the load test's chaos)
	// did not spend the stopped time on it.
	p.spent.addWork(min(time.Since(start), p.work))
	return err
}
