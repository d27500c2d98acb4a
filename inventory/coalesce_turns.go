package inventory

import "time"

// The lock's turns between processes. A worker that releases an item's lock and has buyers
// waiting is awake and asks again at once, while the waiters of other processes first need the
// release message: without a pause it would take the lock back hold after hold, and their
// buyers (purchases and carts of the item, round-robin balancing) would wait many holds.

// streamYield is how long an item's worker waits, after a streaming hold that ran its whole
// window, before it takes the lock again: long enough for the release message to wake a waiter
// in another process and its acquisition to reach Redis, short beside the window.
const streamYield = 10 * time.Millisecond

// contended is the wait for the anchor's lock beyond which a worker takes it that another
// process holds it too; maxContendedPause bounds the pause after such a hold.
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
