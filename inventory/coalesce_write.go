package inventory

import (
	"context"
	"errors"
	"fmt"
)

// write writes the purchases and carts of batch whose work completed, under the hold (the
// anchor's lock with token, the carts' other locks in hl), in one transaction
// (store.writeSales); it returns the batch's answers and the number of orders written.
func (s *coalesced) write(ctx, lockCtx context.Context, hl *holdLocks, token int64, q *itemQueue, batch []*waiter) ([]reply, int) {
	res := s.prepare(ctx, lockCtx, hl, token, q, batch).commit(ctx, lockCtx)
	res.apply(q)
	return res.replies, res.written
}

// pendingWrite is a write prepared under a hold (prepare) and not committed yet: it holds
// what its transaction needs, copied from the hold, so that commit may run while the hold
// goes on admitting buyers (a streaming hold), and what the write changes of the item's queue
// is applied once it is over (writeResult.apply).
type pendingWrite struct {
	s       *coalesced
	itemID  int64
	token   int64
	stock   int             // the stock the worker knew when the write was prepared (q.stock)
	tokens  map[int64]int64 // the fencing token of each item the write updates
	ready   []*waiter       // the sales to write, in order
	replies []reply         // the answers already decided (left out of the write)
}

// writeResult is the outcome of a write: its answers, the orders it wrote, and what the
// worker knows of its item after it.
type writeResult struct {
	replies []reply
	written int
	carts   int    // carts among the orders written
	stock   int    // the item's stock after the write, as far as the worker knows
	fenced  bool   // the write committed under token: the fence has seen it
	tried   bool   // a transaction ran under token: it is spent even if the write failed (a COMMIT whose answer was lost may have landed)
	seen    int64  // the anchor's fence when the database refused token as stale (0: not refused so)
	token   int64  // the anchor's token the write used
	reread  bool   // the write read the item again (read, readSeq)
	read    int    // that read's stock
	readSeq uint64 // the arrivals counted when that read began
}

// behind reports that the database refused the write's token because a newer one has written
// the item: the lock was taken over, or Redis's counter went back.
func (r writeResult) behind() bool { return r.seen > r.token }

// apply records in q what the write changed: the stock, the fence, the carts sold, the read.
func (r writeResult) apply(q *itemQueue) {
	q.stock = r.stock
	q.carts += r.carts
	if r.fenced {
		q.fence = r.token
	}
	q.fence = max(q.fence, r.seen) // the floor of the next hold's token
	if r.reread {
		q.read, q.readSeq = r.read, r.readSeq
	}
}

// prepare decides which of batch the write takes (work done, buyer still there, other locks
// held) and the tokens it writes under; it reads and changes hl, so it runs on the hold's
// goroutine, while commit may run on another.
func (s *coalesced) prepare(ctx, lockCtx context.Context, hl *holdLocks, token int64, q *itemQueue, batch []*waiter) *pendingWrite {
	pw := &pendingWrite{s: s, itemID: q.id, token: token, stock: q.stock}
	replies := make([]reply, 0, len(batch))
	if lockCtx.Err() != nil && ctx.Err() == nil {
		// The lock was lost before the write: nothing is written. Service.run retries each
		// purchase once, under a new hold.
		lost := fmt.Errorf("%w: item %d: lock lost before the write", ErrLockLost, q.id)
		for _, w := range batch {
			if err := w.ctx.Err(); err != nil {
				replies = append(replies, reply{w: w, err: err})
			} else {
				replies = append(replies, reply{w: w, err: lost})
			}
		}
		pw.replies = replies
		return pw
	}
	ready := make([]*waiter, 0, len(batch))
	for _, w := range batch {
		switch {
		case w.workErr != nil:
			replies = append(replies, reply{w: w, err: w.workErr}) // its own failure (or its buyer left): only its buyer
		case !w.state.CompareAndSwap(stateWaiting, stateClaimed):
			// Its buyer left before the write: left out, already answered.
		case w.ctx.Err() != nil:
			// Its buyer left and has not noticed yet (a purchase without work): left out,
			// answered here, nothing written for it.
			replies = append(replies, reply{w: w, err: w.ctx.Err()})
		default:
			ready = append(ready, w)
		}
	}
	pw.tokens, pw.ready = s.otherTokens(lockCtx, q, hl, token, ready, &replies)
	pw.replies = replies
	return pw
}

// commit runs the prepared write's one transaction (store.writeSales), reading the item again
// and admitting again when another writer took stock since the worker's read. It touches
// nothing of the hold: its result is applied by the hold's goroutine (writeResult.apply).
func (pw *pendingWrite) commit(ctx, lockCtx context.Context) writeResult {
	s, token, tokens, ready, replies := pw.s, pw.token, pw.tokens, pw.ready, pw.replies
	out := writeResult{stock: pw.stock, token: token}
	ctx, span := s.trace.start(ctx, SpanHoldWrite)
	units := 0 // written
	finish := func() writeResult {
		out.replies = replies
		if span.IsRecording() {
			span.SetAttributes(AttrItem.Int64(pw.itemID), AttrBuyers.Int(out.written), AttrCarts.Int(out.carts),
				AttrUnits.Int(units), AttrFence.Int64(token))
		}
		span.End()
		return out
	}
	// over: purchases a re-admission left out for want of the units the purchases kept before
	// them take. They are answered once the write is decided: refused against the stock that
	// write left, or with the write's own error (nothing was written for anyone).
	var over []*waiter
	answerOver := func(remaining int, err error) {
		for _, w := range over {
			if err == nil {
				err := checkStock(pw.itemID, remaining, w.p.quantity)
				if err == nil {
					// It fits after all (purchases before it replayed an existing order and
					// wrote nothing): nothing was written for it; Service.run serves it again.
					err = fmt.Errorf("%w: item %d: left out of its hold's write, nothing was written", ErrLockLost, pw.itemID)
				}
				replies = append(replies, reply{w: w, err: err})
				continue
			}
			replies = append(replies, reply{w: w, err: err})
		}
	}
	for attempt := 0; len(ready) > 0; attempt++ {
		sales := make([]sale, len(ready))
		for i, w := range ready {
			sales[i] = sale{p: w.p}
			if w.cart != nil {
				sales[i] = sale{p: w.p, lines: w.cart.c.lines, record: w.cart.record(false)}
			}
		}
		out.tried = true
		res, err := s.store.writeSales(ctx, pw.itemID, sales, s.name, tokens)
		// A short stock the hold did not read: another writer without the lock took stock.
		moved := errors.Is(err, ErrSoldOut) || errors.Is(err, ErrInsufficientStock) || errors.Is(err, errRaced)
		switch {
		case err == nil:
			remaining := out.stock
			for i, w := range ready {
				if res[i].err == nil { // event point: order written
					out.written++
					out.stock -= w.p.quantity
					units += w.p.quantity
					remaining = res[i].rec.Remaining
					if w.cart != nil {
						remaining = anchorRemaining(res[i].cart, pw.itemID, remaining)
						out.carts++
					}
				}
				replies = append(replies, reply{w: w, rec: res[i].rec, cart: res[i].cart, err: res[i].err})
			}
			out.fenced = true
			answerOver(remaining, nil)
			return finish()
		case moved && attempt < maxReadmits && lockCtx.Err() == nil:
			// Another writer took stock since the read: read again and admit again under the
			// same hold, instead of refusing buyers who still fit.
			at := s.arrivals.Load()
			r, rerr := s.store.readFast(lockCtx, pw.itemID)
			if rerr != nil {
				err = rerr
				break
			}
			out.stock, out.reread, out.read, out.readSeq = r.Stock, true, r.Stock, at
			var more []*waiter
			ready, more = readmit(pw.itemID, r.Stock, append(ready, over...), &replies)
			over = more
			if len(ready) == 0 {
				answerOver(r.Stock, nil) // none fits beside another: refused on the stock read
				over = nil
			}
			continue
		case moved && lockCtx.Err() != nil && ctx.Err() == nil:
			err = fmt.Errorf("%w: item %d: lock lost before the write", ErrLockLost, pw.itemID)
		case moved:
			err = fmt.Errorf("%w: item %d: the stock kept changing under the lock", ErrUnavailable, pw.itemID)
		}
		var stale *staleFenceError
		if errors.As(err, &stale) && stale.itemID == pw.itemID {
			out.seen = stale.seen
		}
		fenceRefused(span, err)
		failed(span, err)
		// Event point: a fence refusal (ErrLockLost) or an error; nothing was written.
		for _, w := range ready {
			replies = append(replies, reply{w: w, err: err})
		}
		answerOver(0, err)
		return finish()
	}
	return finish()
}

// readmit keeps, in order, the purchases that fit in stock, the stock read again under the
// hold. One that does not fit in that stock is answered (true: the stock was read during its
// wait); one that fits in it but not beside the purchases kept before it is returned in over:
// its answer waits for the write (see sell).
func readmit(itemID int64, stock int, ready []*waiter, replies *[]reply) (kept, over []*waiter) {
	read := stock
	kept = ready[:0]
	for _, w := range ready {
		if err := checkStock(itemID, read, w.p.quantity); err != nil {
			*replies = append(*replies, reply{w: w, err: err})
			continue
		}
		if w.p.quantity > stock {
			over = append(over, w)
			continue
		}
		stock -= w.p.quantity
		kept = append(kept, w)
	}
	return kept, over
}

// anchorRemaining is the stock a cart's write left on its anchor item (def if it has no line
// of it).
func anchorRemaining(rec CartReceipt, anchor int64, def int) int {
	for _, l := range rec.Lines {
		if l.ItemID == anchor {
			return l.Remaining
		}
	}
	return def
}
