package locking

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// contexts are the live contexts a Lock handle or a Multi handed out (their Context method):
// its end (loss or release) cancels them all. A context that ends first (its parent ended: the
// request it served was answered) leaves the set, so a hold that lives long and hands a context
// to each of many callers, one after the other (a streaming hold of inventory), keeps only the
// ones still running instead of one per caller since it began.
type contexts struct {
	next    uint64
	cancels map[uint64]context.CancelCauseFunc
}

// add registers cancel, the cancel function of ctx. The caller holds mu, which guards c; the
// clean-up at ctx's end takes it.
func (c *contexts) add(mu *sync.Mutex, ctx context.Context, cancel context.CancelCauseFunc) {
	if c.cancels == nil {
		c.cancels = make(map[uint64]context.CancelCauseFunc)
	}
	id := c.next
	c.next++
	c.cancels[id] = cancel
	context.AfterFunc(ctx, func() { // runs once ctx ends, on its own goroutine
		mu.Lock()
		delete(c.cancels, id)
		mu.Unlock()
	})
}

// cancelAll cancels every context with cause, in the order they were handed out, and empties
// the set; the caller holds its mutex. The order matters to a holder that takes a context for
// itself first and then hands one to each of its workers (inventory's holds): a worker whose
// context ended finds the holder's ended too, and reports the loss, not a bare cancellation.
func (c *contexts) cancelAll(cause error) {
	for _, id := range slices.Sorted(maps.Keys(c.cancels)) {
		c.cancels[id](cause)
	}
	c.cancels = nil
}

// live is the number of contexts in the set (tests); the caller holds its mutex.
func (c *contexts) live() int { return len(c.cancels) }
