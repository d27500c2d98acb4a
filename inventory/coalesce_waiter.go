package inventory

import (
	"context"
	"sync/atomic"
	"time"
)

// A buyer's place in its item's queue (a waiter) and the answers a hold gives it: the
// coalescing worker (coalesce.go) claims waiters for a hold and answers each once.

// A waiter's state: a buyer may leave while waiting, until the worker claims it for the write.
const (
	stateWaiting   int32 = iota
	stateClaimed         // in the hold's write: its buyer waits for the answer
	stateAbandoned       // its buyer left: the worker skips it
)

// waiter is one purchase waiting for, or served by, its item's worker.
type waiter struct {
	ctx      context.Context // the buyer's
	p        purchase
	enqueued time.Time
	seq      uint64 // its place in coalesced.arrivals
	state    atomic.Int32
	admitted atomic.Bool
	done     chan answer // buffered (1): answering never blocks the worker
	workErr  error       // the outcome of its work; owned by the hold
	cart     *cartWait   // a cart (coalesce_cart.go); nil for a single purchase
}

type answer struct {
	rec  Receipt
	cart CartReceipt
	err  error
}

// answer gives the buyer its outcome; a waiter is answered once.
func (w *waiter) answer(rec Receipt, err error) {
	select {
	case w.done <- answer{rec: rec, err: err}:
	default: // already answered: cannot happen, and must never block the worker
	}
}

// answerCart gives a cart's buyer its outcome.
func (w *waiter) answerCart(rec CartReceipt, err error) {
	select {
	case w.done <- answer{cart: rec, err: err}:
	default: // already answered
	}
}

// reply is an answer a hold gives once its lock is released.
type reply struct {
	w    *waiter
	rec  Receipt
	cart CartReceipt // a cart's
	err  error
}

// send gives the reply to its buyer.
func (r reply) send() {
	if r.w.cart != nil {
		r.w.answerCart(r.cart, r.err)
		return
	}
	r.w.answer(r.rec, r.err)
}
