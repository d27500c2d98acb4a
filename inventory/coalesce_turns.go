package inventory

import (
	"context"
	"time"
)

// The lock's turns between processes. A worker that releases an item's lock and has buyers
// waiting is awake and asks again at once, while the waiters of other processes first need the
// release message: without a pause it would take the lock back hold after hold, and their
// buyers (purchases and carts of the item, round-robin balancing) would wait many holds.

// streamYield is how long an item's worker waits, after a streaming hold that ran its whole
// window, before it takes the lock again: long enough for the release message to wake a waiter
// in another process and its acquisition to reach Redis, short beside the window.
const streamYield = 10 * time.Millisecond

// contended is the wait for the anchor's lock beyond which a worker takes it that another
// process holds it too, when the lock cannot tell (heldWaited); maxContendedPause bounds the
// pause after such a hold.
const (
	contended         = time.Millisecond
	maxContendedPause = 50 * time.Millisecond
	// sharedFor is how long after its last wait for the lock a worker takes it that other
	// processes still want it, and pauses after its holds that worked.
	sharedFor = time.Second
)

// holdPause is the pause before the next hold after a hold of batch: a quarter of its longest
// work, from 1ms to streamYield; none without work (a hold then takes a few milliseconds, and
// the lock changes hands between processes as often as it would with the pause, since their
// waiters are already awake).
func holdPause(batch []*waiter) time.Duration {
	var longest time.Duration
	for _, w := range batch {
		longest = max(longest, w.p.work)
	}
	if longest <= 0 {
		return 0
	}
	return min(streamYield, max(time.Millisecond, longest/4))
}

// turnLocker is a Locker that can take a lock in first-come order across processes
// (NewLocker's: locking's fair lock over the same keys).
type turnLocker interface {
	ObtainInTurn(ctx context.Context, key string, floor int64) (Held, error)
}

// obtainInTurn takes the anchor's lock for a hold: in turn when the locker can, so that the
// processes whose holds share a hot item take it one after the other; as Obtain otherwise.
func (s *coalesced) obtainInTurn(ctx context.Context, itemID, floor int64) (Held, error) {
	if tl, ok := s.locker.(turnLocker); ok {
		return tl.ObtainInTurn(ctx, ItemLockName(itemID), floor)
	}
	return obtain(ctx, s.locker, itemID, floor)
}

// inTurn reports whether the workers take their anchor's lock in turn (turnLocker): the lock
// then goes round the processes that wait for it without any pause.
func (s *coalesced) inTurn() bool {
	_, ok := s.locker.(turnLocker)
	return ok
}

// pauseAfter sets the pause of q's worker after a hold that sold batch, having taken the lock
// at got after waiting waited for it. While other processes want the lock too, it pauses
// (holdPause; and as long as the hold kept the lock when it had to wait for it), so that their
// waiters get their turns. A worker that takes the lock in turn (turnLocker) would queue behind
// them anyway, and pauses all the same: measured (docs/measured.md#carts), rejoining the queue
// at once left the round-robin carts' p99 at 3.0x guard's on average, pausing at 2.7x.
func (s *coalesced) pauseAfter(q *itemQueue, batch []*waiter, got time.Time, waited bool) {
	q.pause = 0
	if time.Since(q.shared) >= sharedFor {
		// Alone with the item (routed by item), a worker never waits for its lock and
		// never pauses.
		return
	}
	q.pause = holdPause(batch)
	if q.pause > 0 && waited {
		// This hold waited for it: pause as long as this hold kept it, so that the lock goes
		// round them before this worker asks again (a pause shorter than a hold lets it race
		// the waiter that lost the last turn, and a waiter may lose many turns in a row).
		q.pause = max(q.pause, min(time.Since(got), maxContendedPause))
	}
}

// uncontested reports whether q's worker may be alone with its item's lock: no hold of it has
// waited for the lock for sharedFor (the hold in progress included).
func (s *coalesced) uncontested(q *itemQueue) bool {
	return time.Since(q.shared) >= sharedFor
}

// waitedHeld is a Held that tells whether its Obtain had to wait (locking.Lock.Waited).
type waitedHeld interface {
	Waited() bool
}

// heldWaited reports whether the Obtain of h, which took took, had to wait for the lock:
// another process held it. A lock that cannot tell is judged by the time it took.
func heldWaited(h Held, took time.Duration) bool {
	if w, ok := h.(waitedHeld); ok {
		return w.Waited()
	}
	return took > contended
}
