package inventory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// maxCartSkips is how many holds may leave a cart queued because one of its other items'
// locks was busy: the next hold of its anchor first takes every lock of the skipped carts, in
// ascending item order, waiting for each, holding nothing when it starts (takeStarving).
const maxCartSkips = 2

// cartWait is what a cart carries in its anchor item's queue, besides its purchase (whose item
// and quantity are the anchor's line, whose work is the cart's).
type cartWait struct {
	c      cart
	floors map[int64]int64 // each item's stored fence as the cart read it: its lock's floor
	record func(degraded bool) recordFunc
	// degraded sells the cart through the guard alone (the lock service down, OnRedisDown guard).
	degraded func(ctx context.Context) (CartReceipt, error)
	skips    int // holds that left it queued, its other locks busy (the worker's)
}

// others returns the cart's items other than anchor, ascending.
func (cw *cartWait) others(anchor int64) []int64 {
	var out []int64
	for _, l := range cw.c.lines {
		if l.itemID != anchor {
			out = append(out, l.itemID)
		}
	}
	return out
}

// tryLocker is a Locker that can take a lock without waiting (one attempt): NewLocker's is.
// Carts are coalesced only over one (Service.Checkout takes every lock at once otherwise).
type tryLocker interface {
	TryObtain(ctx context.Context, key string, floor int64) (Held, error)
}

// holdLocks are the locks of one hold: its anchor item's, and those of the other items of the
// carts it admitted. A hold takes the other locks without waiting while it holds the anchor's
// (takeOthers); only before a hold, holding nothing, does a worker wait for several locks, in
// ascending item order (takeStarving). No hold ever waits for a lock while it holds one out of
// that order, so no cycle of waits can form across processes (docs/DESIGN.md §5.3).
type holdLocks struct {
	anchor Held
	others map[int64]*otherLock
}

// locks returns the hold's locks, its anchor's first.
func (hl *holdLocks) locks() []Held {
	out := []Held{hl.anchor}
	for _, o := range hl.others {
		out = append(out, o.held)
	}
	return out
}

// otherLock is a lock of a hold besides its anchor's.
type otherLock struct {
	held    Held
	ctx     context.Context // ends when the lock is lost or released
	token   int64           // the token the next write uses
	written bool            // a write used token: a streaming hold's next write draws another
	used    time.Time       // when a cart last needed it (taken, or written): streamHold lets idle ones go
}

// releaseAll gives every lock of the hold back: the other locks first, concurrently (one
// round trip to Redis for all of them, not one each), then the anchor's. In that order, the
// next holder of the anchor's lock (another process's hold of the same hot item) finds the
// other locks of its carts free; released together, the anchor's release could reach Redis
// first, and that hold would leave its carts queued for the lock still being released, one
// whole turn of the item's lock each time.
func (s *coalesced) releaseAll(ctx context.Context, hl *holdLocks) {
	var wg sync.WaitGroup
	for _, o := range hl.others {
		wg.Go(func() { s.release(ctx, o.held) }) // owner: releaseAll, which waits for it
	}
	wg.Wait()
	s.release(ctx, hl.anchor)
}

// carts reports whether carts can be coalesced over s's locker (it takes a lock without waiting).
func (s *coalesced) carts() bool {
	_, ok := s.locker.(tryLocker)
	return ok
}

// buyCart waits for a hold of the cart's anchor item (the first of its items whose worker is
// running in this process, else its lowest) to sell it: admitted as a purchase of its anchor
// line, its work runs with the batch's, its other items' locks are taken by the hold, and its
// lines are written in the hold's one transaction, all or nothing.
func (s *coalesced) buyCart(ctx context.Context, cw *cartWait, work time.Duration, sp *spent) (CartReceipt, error) {
	w := &waiter{ctx: ctx, p: purchase{work: work, spent: sp, fingerprint: cw.c.fp}, cart: cw,
		enqueued: time.Now(), seq: s.arrivals.Add(1), done: make(chan answer, 1)}
	if err := s.enqueue(w); err != nil {
		return CartReceipt{}, err
	}
	var a answer
	select {
	case a = <-w.done:
	case <-ctx.Done():
		if w.state.CompareAndSwap(stateWaiting, stateAbandoned) {
			if !w.admitted.Load() {
				sp.addLock(time.Since(w.enqueued))
				return CartReceipt{}, fmt.Errorf("%w: cart of %d items: %w", ErrLockTimeout, len(cw.c.lines), ctx.Err())
			}
			return CartReceipt{}, ctx.Err()
		}
		a = <-w.done // claimed for the write, which is short: its answer comes
	}
	var se *stockError
	if errors.As(a.err, &se) && se.itemID == w.p.itemID {
		// Refused on its anchor's stock read: the cart's error names the line.
		return CartReceipt{}, &ShortLinesError{Lines: []ShortLine{{ItemID: se.itemID, Requested: w.p.quantity, Available: max(se.stock, 0)}}}
	}
	return a.cart, a.err
}

// anchorOf picks the anchor of a cart waiter (under s.mu): its first item, ascending, whose
// worker runs, else its lowest; the waiter's purchase becomes that item's line.
func (s *coalesced) anchorOf(w *waiter) {
	l := w.cart.c.lines[0]
	for _, x := range w.cart.c.lines {
		if s.items[x.itemID] != nil {
			l = x
			break
		}
	}
	w.p.itemID, w.p.quantity = l.itemID, l.quantity
}

// takeStarving takes, before a hold of q and holding nothing, every lock of the carts that
// holds left queued maxCartSkips times (q's item among them), in ascending item order,
// waiting for each (as ObtainMany does: a waiter holds only keys that sort before the one it
// waits for, so such waits never close a cycle). It returns nil, false when no cart starves.
// When a wait fails, the locks taken are given back and the starving carts are answered (or
// sold degraded), and it returns nil, true.
func (s *coalesced) takeStarving(ctx context.Context, q *itemQueue) (*holdLocks, bool) {
	s.mu.Lock()
	floors := map[int64]int64{q.id: q.fence}
	var starving []*waiter
	for _, w := range q.pending {
		if w.cart == nil || w.cart.skips < maxCartSkips || w.state.Load() == stateAbandoned {
			continue
		}
		starving = append(starving, w)
		for _, id := range w.cart.others(q.id) {
			floors[id] = max(floors[id], w.cart.floors[id])
		}
	}
	s.mu.Unlock()
	if len(starving) == 0 {
		return nil, false
	}
	s.log.DebugContext(ctx, "carts left queued too often: taking their locks in item order", "anchor", q.id, "carts", len(starving), "locks", len(floors))
	ctx, span := s.trace.start(ctx, SpanCartEscalate)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(AttrItem.Int64(q.id), AttrCarts.Int(len(starving)), AttrLocks.Int(len(floors)))
	}
	hl := &holdLocks{others: make(map[int64]*otherLock)}
	for _, id := range slices.Sorted(maps.Keys(floors)) {
		held, err := s.obtainInTurn(ctx, id, floors[id])
		if err != nil {
			failed(span, err)
			if hl.anchor != nil {
				s.releaseAll(ctx, hl)
			} else {
				for _, o := range hl.others {
					s.release(ctx, o.held)
				}
			}
			s.answerSet(q, starving, err)
			return nil, true
		}
		if id == q.id {
			hl.anchor = held
			continue
		}
		hl.others[id] = &otherLock{held: held, ctx: held.Context(s.life.ctx), token: held.Token(), used: time.Now()}
	}
	return hl, false
}

// answerSet answers the waiters of set (still queued) with err, or sells them through the
// guard alone when err is the lock service's outage under OnRedisDown guard, and removes them
// from the queue.
func (s *coalesced) answerSet(q *itemQueue, set []*waiter, err error) {
	s.mu.Lock()
	q.pending = slices.DeleteFunc(q.pending, func(w *waiter) bool { return slices.Contains(set, w) })
	s.mu.Unlock()
	if !sellsDegraded(s.onDown, err) {
		for _, w := range set {
			if w.state.CompareAndSwap(stateWaiting, stateClaimed) {
				w.p.spent.addLock(time.Since(w.enqueued))
				w.answer(Receipt{}, err)
			}
		}
		return
	}
	s.degradeAll(q, set, err)
}

// takeOthers takes, without waiting, the locks of the other items of the carts in batch that
// the hold does not hold yet (one attempt each, concurrently). A cart whose other locks are all
// held stays in the batch (its wait for the lock ends here); one with a busy lock goes back to
// the front of the queue, not admitted, its skips counted, for a later hold.
func (s *coalesced) takeOthers(ctx context.Context, q *itemQueue, hl *holdLocks, batch []*waiter) []*waiter {
	tl, _ := s.locker.(tryLocker)
	want := make(map[int64]int64)
	for _, w := range batch {
		if w.cart == nil {
			continue
		}
		for _, id := range w.cart.others(q.id) {
			if hl.others[id] == nil {
				want[id] = max(want[id], w.cart.floors[id])
			}
		}
	}
	// One attempt each, concurrently: none waits, so their order does not matter.
	busy := make(map[int64]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, floor := range want {
		if tl == nil {
			busy[id] = true
			continue
		}
		wg.Go(func() { // owner: takeOthers, which waits for it
			held, err := tl.TryObtain(ctx, ItemLockName(id), floor)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.log.DebugContext(ctx, "cart left queued: the lock of another of its items is taken", "anchor", q.id, "item", id, "err", err)
				busy[id] = true
				return
			}
			hl.others[id] = &otherLock{held: held, ctx: held.Context(s.life.ctx), token: held.Token(), used: time.Now()}
		})
	}
	wg.Wait()
	kept := batch[:0]
	var back []*waiter
	now := time.Now()
	for _, w := range batch {
		if w.cart != nil && slices.ContainsFunc(w.cart.others(q.id), func(id int64) bool { return busy[id] }) {
			w.admitted.Store(false)
			w.cart.skips++
			back = append(back, w)
			continue
		}
		if w.cart != nil {
			w.p.spent.addLock(now.Sub(w.enqueued))
		}
		kept = append(kept, w)
	}
	if len(back) > 0 {
		s.mu.Lock()
		q.pending = append(back, q.pending...)
		s.mu.Unlock()
	}
	return kept
}

// otherTokens returns the fencing tokens of a write under hl: the anchor's, and each other
// lock's that a cart of ready needs (a lock a write already used draws a new token first,
// NextToken, as a streaming hold's anchor does). A cart whose other lock is lost, or cannot
// draw a new token, is answered ErrLockLost (its retry takes a new hold) and left out.
func (s *coalesced) otherTokens(lockCtx context.Context, q *itemQueue, hl *holdLocks, anchorToken int64,
	ready []*waiter, replies *[]reply) (map[int64]int64, []*waiter) {
	tokens := map[int64]int64{q.id: anchorToken}
	// The other locks this write uses that a write already used draw their next tokens first,
	// concurrently (one round trip for all of them).
	var draw []*otherLock
	for _, w := range ready {
		if w.cart == nil {
			continue
		}
		for _, id := range w.cart.others(q.id) {
			if o := hl.others[id]; o != nil && o.written && o.ctx.Err() == nil && !slices.Contains(draw, o) {
				draw = append(draw, o)
			}
		}
	}
	var wg sync.WaitGroup
	for _, o := range draw {
		nt, can := o.held.(nextTokener)
		if !can {
			continue
		}
		wg.Go(func() { // owner: otherTokens, which waits for it
			if next, err := nt.NextToken(lockCtx); err == nil {
				o.token, o.written = next, false
			}
		})
	}
	wg.Wait()
	kept := ready[:0]
	for _, w := range ready {
		if w.cart == nil {
			kept = append(kept, w)
			continue
		}
		ok := true
		for _, id := range w.cart.others(q.id) {
			o := hl.others[id]
			if o == nil || o.written || o.ctx.Err() != nil {
				ok = false
				break
			}
			tokens[id] = o.token
		}
		if !ok {
			*replies = append(*replies, reply{w: w, err: fmt.Errorf("%w: cart of anchor %d: the lock of another of its items was lost before the write", ErrLockLost, q.id)})
			continue
		}
		kept = append(kept, w)
	}
	now := time.Now()
	for id := range tokens {
		if o := hl.others[id]; o != nil {
			o.written, o.used = true, now
		}
	}
	return tokens, kept
}

// degradeAll sells every waiter of set (a single purchase, or a cart) through the guard alone,
// concurrently, each under its buyer's context: the lock service is down (err) and
// OnRedisDown is guard.
func (s *coalesced) degradeAll(q *itemQueue, set []*waiter, err error) {
	var wg sync.WaitGroup
	for _, w := range set {
		if !w.state.CompareAndSwap(stateWaiting, stateClaimed) { // its buyer left
			continue
		}
		w.p.spent.addLock(time.Since(w.enqueued))
		if w.cart != nil {
			wg.Add(1)
			go func() { // owner: degradeAll, which waits for it
				defer wg.Done()
				rec, err := w.cart.degraded(w.ctx)
				w.answerCart(rec, err)
			}()
			continue
		}
		s.emit(Event{Kind: EventWaitEnd, ItemID: q.id, Strategy: s.name, Quantity: w.p.quantity, Err: err})
		wg.Add(1)
		go func() { // owner: degradeAll, which waits for it
			defer wg.Done()
			rec, err := sellDegraded(w.ctx, s.deps, w.p, s.name)
			w.answer(rec, err)
		}()
	}
	wg.Wait()
}
