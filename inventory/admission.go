package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/locking"
)

// DefaultAdmissionWait is how long NewAdmission's Acquire waits for a permit by default.
const DefaultAdmissionWait = 100 * time.Millisecond

// NewAdmission returns an Admission that lets at most s.Permits() purchases of one item be
// in flight across every process sharing the semaphore's Redis (key "item:<id>", permits that
// expire if their holder dies). Acquire waits up to wait (DefaultAdmissionWait when zero or
// negative) for a permit and otherwise fails with an error wrapping ErrOverloaded, so that a
// hot item sheds load (429 overloaded) instead of queueing thousands of waiters on its lock.
// It fails with an error wrapping ErrUnavailable when Redis could not be asked; a caller
// whose ctx ended gets ErrOverloaded joined with ctx's error. The release function gives the
// permit back (best effort: an unreturned permit expires with its lease). Permits are taken
// with locking.WithTakeover: those of a process that died come back about one ProcessTTL (1s)
// after its death instead of its lease (a permit protects no data, so this is safe whatever the
// strategy: DESIGN §3.6).
func NewAdmission(s *locking.Semaphore, wait time.Duration) Admission {
	if wait <= 0 {
		wait = DefaultAdmissionWait
	}
	return admission{s: s, wait: wait}
}

type admission struct {
	s    *locking.Semaphore
	wait time.Duration
}

func (a admission) Acquire(ctx context.Context, itemID int64) (func(), error) {
	p, err := a.s.Acquire(ctx, ItemLockName(itemID), locking.WithWait(a.wait), locking.WithTakeover())
	switch {
	case err == nil:
		return func() { _ = p.Release(context.WithoutCancel(ctx)) }, nil
	case errors.Is(err, locking.ErrNotObtained):
		return nil, fmt.Errorf("%w: item %d has %d purchases in flight: %w", ErrOverloaded, itemID, a.s.Permits(), err)
	default:
		return nil, fmt.Errorf("%w: admission limit: %w", ErrUnavailable, err)
	}
}
