package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxBatch is the default of Config.MaxBatch: the most purchases one lock hold sells.
const DefaultMaxBatch = 64

// streamYield is how long an item's worker waits, after a streaming hold that ran its whole
// window, before it takes the lock again: long enough for the release message to wake a waiter
// in another process and its acquisition to reach Redis, short beside the window.
const streamYield = 10 * time.Millisecond

// maxReadmits bounds how often one hold reads again and admits again after its guarded update
// found less stock than it had read (another writer without the lock).
const maxReadmits = 3

// HoldObserver receives one call per lock hold of a coalesced strategy (metrics). It must be
// quick: it runs on the item's worker.
type HoldObserver interface {
	// Hold reports a hold of itemID's lock that wrote orders orders (0 when it sold nothing:
	// every admitted buyer left, failed or was a replay, or the lock was lost).
	Hold(strategy string, itemID int64, orders int)
}

// coalesced is lock+guard (and redlock+guard) when a hold may sell to several buyers
// (Config.MaxBatch > 1). In each process, the purchases of one item wait in a local queue for
// the item's worker, which owns the hold: the worker, on a context no buyer can cancel, takes
// the item's lock once (floored by the stored fence), reads the stock once, admits waiting
// purchases in arrival order while they fit (answering the others sold out or insufficient
// stock at once, with no work spent), runs the admitted purchases' work concurrently, each
// under its buyer's context joined with the lock's, and writes every completed purchase in one
// transaction (store.writeOrders, the write of one purchase too). Then it releases the lock, so that other processes get their
// turn, and serves the next batch. The fence check is unchanged: one write per hold, with the
// hold's token, refused when a newer token has written.
type coalesced struct {
	deps
	locker   Locker
	name     string
	maxBatch int
	onDown   string        // Config.OnRedisDown: sell through the guard alone when the lock service is down
	stream   time.Duration // Config.StreamHold: how long a hold admits buyers who arrive while it works

	mu    sync.Mutex
	items map[int64]*itemQueue // items with a running worker
}

func newCoalesced(d deps, l Locker, name string, maxBatch int, onDown string, stream time.Duration) *coalesced {
	return &coalesced{deps: d, locker: l, name: name, maxBatch: maxBatch, onDown: onDown, stream: stream, items: make(map[int64]*itemQueue)}
}

// itemQueue is one item's queue and what its worker knows of the item. pending is guarded by
// coalesced.mu; the other fields belong to the worker.
type itemQueue struct {
	id      int64
	pending []*waiter     // arrival order; only the worker removes entries, from the front
	wake    chan struct{} // (1) a purchase joined pending: a streaming hold admits it

	known  bool      // stock and fence were read by this worker
	stock  int       // the stock after this worker's last read or write
	read   int       // the stock this worker's last read found
	yield  bool      // the last hold streamed until its window closed: pause before the next
	readAt time.Time // when that read began: it is true for the purchases waiting then
	fence  int64     // the stored fence token last seen: the floor of the next token
}

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
	state    atomic.Int32
	admitted atomic.Bool
	done     chan answer // buffered (1): answering never blocks the worker
	workErr  error       // the outcome of its work; owned by the hold
}

type answer struct {
	rec Receipt
	err error
}

// answer gives the buyer its outcome; a waiter is answered once.
func (w *waiter) answer(rec Receipt, err error) {
	select {
	case w.done <- answer{rec, err}:
	default: // already answered: cannot happen, and must never block the worker
	}
}

func (s *coalesced) buy(ctx context.Context, p purchase) (Receipt, error) {
	w := &waiter{ctx: ctx, p: p, enqueued: time.Now(), done: make(chan answer, 1)}
	// For the observer (the lab), a coalesced purchase waits for the item's lock from its
	// arrival in the queue until a hold admits or answers it. Told before it is queued, so
	// that the hold's end of the wait always comes after it.
	s.emit(Event{Kind: EventWait, ItemID: p.itemID, Strategy: s.name, Quantity: p.quantity})
	if err := s.enqueue(w); err != nil {
		s.emit(Event{Kind: EventWaitEnd, ItemID: p.itemID, Strategy: s.name, Quantity: p.quantity, Err: err})
		return Receipt{}, err
	}
	select {
	case a := <-w.done:
		return a.rec, a.err
	case <-ctx.Done():
	}
	if w.state.CompareAndSwap(stateWaiting, stateAbandoned) { // left out of any write
		if !w.admitted.Load() {
			s.emit(Event{Kind: EventWaitEnd, ItemID: p.itemID, Strategy: s.name, Quantity: p.quantity, Err: ctx.Err()})
			p.spent.addLock(time.Since(w.enqueued))
			return Receipt{}, fmt.Errorf("%w: item %d: %w", ErrLockTimeout, p.itemID, ctx.Err())
		}
		return Receipt{}, ctx.Err()
	}
	// Claimed for the hold's write, which is short and never abandoned: its answer comes.
	a := <-w.done
	return a.rec, a.err
}

// enqueue appends w to its item's queue and starts the item's worker if none runs.
func (s *coalesced) enqueue(w *waiter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.items[w.p.itemID]
	if q == nil {
		if !s.life.add() {
			return fmt.Errorf("%w: the service is shutting down", ErrUnavailable)
		}
		q = &itemQueue{id: w.p.itemID, wake: make(chan struct{}, 1)}
		s.items[q.id] = q
		go s.run(q) // owner: the Service (life), whose Close waits for it
	}
	q.pending = append(q.pending, w)
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
	return nil
}

// run is the item's worker: one hold after the other while purchases wait; it ends when the
// queue is empty (the next purchase starts a new worker) or the service closes.
func (s *coalesced) run(q *itemQueue) {
	defer s.life.wg.Done()
	for {
		s.mu.Lock()
		live := q.pending[:0]
		for _, w := range q.pending {
			if w.state.Load() != stateAbandoned {
				live = append(live, w)
			}
		}
		clear(q.pending[len(live):])
		q.pending = live
		if len(q.pending) == 0 || s.life.ctx.Err() != nil {
			for _, w := range q.pending {
				w.answer(Receipt{}, fmt.Errorf("%w: the service is shutting down", ErrUnavailable))
			}
			delete(s.items, q.id)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if q.yield {
			// The last hold streamed until its window closed with buyers still coming: give
			// the lock's waiters in other processes (a cart of this item) the moment its
			// release message needs to reach them, or this worker would take it back first.
			q.yield = false
			t := time.NewTimer(streamYield)
			select {
			case <-t.C:
			case <-s.life.ctx.Done():
				t.Stop()
			}
		}
		s.hold(q)
	}
}

// answerFront answers, with err, the waiters among the first n entries of the queue (all of
// them for n < 0) and removes those entries.
func (s *coalesced) answerFront(q *itemQueue, n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 || n > len(q.pending) {
		n = len(q.pending)
	}
	for _, w := range q.pending[:n] {
		if w.state.Load() != stateAbandoned {
			w.p.spent.addLock(time.Since(w.enqueued))
			s.emit(Event{Kind: EventWaitEnd, ItemID: q.id, Strategy: s.name, Quantity: w.p.quantity, Err: err})
			w.answer(Receipt{}, err)
		}
	}
	q.pending = append([]*waiter(nil), q.pending[n:]...)
}

// answerWaiting answers, with err, the waiters that were in the queue when the worker's last
// read began (q.readAt) and removes them; those that arrived since stay for the next read (the
// stock may have grown in between: a hold cancelled), so that the answer is true of their wait.
func (s *coalesced) answerWaiting(q *itemQueue, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var later []*waiter
	for _, w := range q.pending {
		switch {
		case w.state.Load() == stateAbandoned:
		case !w.enqueued.Before(q.readAt):
			later = append(later, w)
		default:
			w.p.spent.addLock(time.Since(w.enqueued))
			s.emit(Event{Kind: EventWaitEnd, ItemID: q.id, Strategy: s.name, Quantity: w.p.quantity, Err: err})
			w.answer(Receipt{}, err)
		}
	}
	q.pending = later
}

// hold serves one batch of the item's queue under one hold of its lock.
func (s *coalesced) hold(q *itemQueue) {
	ctx := s.life.ctx
	if !q.known || q.stock <= 0 {
		// Not known yet, or sold out when last seen: one read without the lock answers a
		// sold-out queue at once (and gives the floor of the token).
		at := time.Now()
		r, err := s.store.readFast(ctx, q.id)
		if err != nil {
			s.answerFront(q, -1, err)
			return
		}
		q.known, q.stock, q.read, q.readAt, q.fence = true, r.Stock, r.Stock, at, r.FenceToken
		if err := checkStock(q.id, r.Stock, 1); err != nil {
			s.answerWaiting(q, err) // sold out: event point of every refused buyer
			return
		}
	}
	s.mu.Lock()
	n := len(q.pending) // the purchases this hold is taken for
	s.mu.Unlock()

	held, err := obtain(ctx, s.locker, q.id, q.fence)
	if err != nil {
		s.obtainFailed(q, n, err)
		return
	}
	var replies []reply
	written := 0
	defer func() {
		// Release first, then answer the batch: once a buyer has its answer, the hold that
		// served it is over (and other processes may have their turn).
		s.release(ctx, held)
		if s.holds != nil {
			s.holds.Hold(s.name, q.id, written)
		}
		for _, r := range replies {
			r.w.answer(r.rec, r.err)
		}
	}()
	token := held.Token()
	lockCtx := held.Context(ctx)

	at := time.Now()
	r, err := s.store.readFast(lockCtx, q.id)
	if err != nil {
		if lockCtx.Err() != nil && ctx.Err() == nil {
			// Lost before anyone was admitted: nothing written. Answered, not served by the
			// next hold, so that Service.run's one retry bounds it as on every path.
			err = fmt.Errorf("%w: item %d: lock lost before the write", ErrLockLost, q.id)
		}
		s.answerFront(q, n, err)
		return
	}
	q.known, q.stock, q.read, q.readAt, q.fence = true, r.Stock, r.Stock, at, r.FenceToken
	if r.FenceToken >= token {
		// A token the database has already seen (Redis lost its counter and the floor we
		// passed was older than the row): the fenced write would be refused. Refuse before
		// any work; Service.run retries each purchase once, under a new hold floored by the
		// fence just read. Event point: fence refusal.
		s.answerFront(q, n, &staleFenceError{itemID: q.id, token: token, seen: r.FenceToken})
		return
	}
	batch := s.admit(q, r.Stock, s.maxBatch)
	if len(batch) == 0 {
		return
	}
	if nt, ok := held.(nextTokener); ok && s.stream > 0 {
		written, q.yield = s.streamHold(ctx, lockCtx, held, nt, q, batch)
		return
	}
	replies, written = s.sell(ctx, lockCtx, held, q, batch)
}

// reply is an answer a hold gives once its lock is released.
type reply struct {
	w   *waiter
	rec Receipt
	err error
}

// obtainFailed answers the purchases a hold was taken for when the lock could not be
// obtained: ErrLockTimeout (the wait ran out), ErrLockNotReplicated (too few replicas
// acknowledged it) or ErrUnavailable (the lock service is down).
// With Config.OnRedisDown "guard" and the lock service down, each of them is sold through the
// database guard alone instead (degraded.go), concurrently, each under its buyer's context.
func (s *coalesced) obtainFailed(q *itemQueue, n int, err error) {
	if !sellsDegraded(s.onDown, err) {
		s.answerFront(q, n, err)
		return
	}
	s.mu.Lock()
	if n > len(q.pending) {
		n = len(q.pending)
	}
	front := q.pending[:n:n]
	q.pending = append([]*waiter(nil), q.pending[n:]...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range front {
		if !w.state.CompareAndSwap(stateWaiting, stateClaimed) { // its buyer left
			continue
		}
		w.p.spent.addLock(time.Since(w.enqueued))
		s.emit(Event{Kind: EventWaitEnd, ItemID: q.id, Strategy: s.name, Quantity: w.p.quantity, Err: err})
		wg.Add(1)
		go func() { // owner: obtainFailed, which waits for it
			defer wg.Done()
			rec, err := sellDegraded(w.ctx, s.deps, w.p, s.name)
			w.answer(rec, err)
		}()
	}
	wg.Wait()
}

// admit takes the batch of this hold from the front of the queue, in arrival order, while the
// purchases fit in stock (at most limit of them). A purchase that does not fit in the stock the
// worker last read (q.read) and that was waiting when that read began is answered sold out or
// insufficient stock at once, with no work spent: that stock was there during its wait, so the
// answer is true. A purchase that fits in what was read but not in what is left beside the
// purchases admitted before it (stock) is NOT answered now: those have not written their units
// yet (they may never: a buyer leaves, the lock is lost, the write fails), so "sold out" would be
// a promise the database does not keep yet. Nor is one that arrived after the read began (the
// stock may have grown since: a hold cancelled). Either stays in the queue, first, for a later
// read or write to decide.
func (s *coalesced) admit(q *itemQueue, stock, limit int) []*waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var batch, next []*waiter
	i := 0
	for ; i < len(q.pending) && len(batch) < limit; i++ {
		w := q.pending[i]
		if w.state.Load() == stateAbandoned {
			continue
		}
		if err := checkStock(q.id, q.read, w.p.quantity); err != nil {
			if w.enqueued.Before(q.readAt) {
				w.p.spent.addLock(now.Sub(w.enqueued))
				s.emit(Event{Kind: EventWaitEnd, ItemID: q.id, Strategy: s.name, Quantity: w.p.quantity, Err: err})
				w.answer(Receipt{}, err) // refused on the stock read, with no work spent
				continue
			}
			next = append(next, w) // arrived after the read: the next read decides
			continue
		}
		if w.p.quantity > stock {
			next = append(next, w) // fits in the read, not beside the batch: a later hold decides
			continue
		}
		w.p.spent.addLock(now.Sub(w.enqueued))
		s.emit(Event{Kind: EventWaitEnd, ItemID: q.id, Strategy: s.name, Quantity: w.p.quantity})
		stock -= w.p.quantity
		w.admitted.Store(true)
		batch = append(batch, w)
	}
	q.pending = append(next, q.pending[i:]...)
	return batch
}

// sell runs the batch's work and writes the purchases whose work completed; it returns the
// batch's answers and the number of orders written.
func (s *coalesced) sell(ctx, lockCtx context.Context, held Held, q *itemQueue, batch []*waiter) ([]reply, int) {
	var wg sync.WaitGroup
	for _, w := range batch {
		if w.p.work <= 0 {
			continue
		}
		wg.Add(1)
		go func() { // owner: sell, which waits for it
			defer wg.Done()
			w.workErr = s.work(held.Context(w.ctx), w.p)
		}()
	}
	wg.Wait()
	return s.write(ctx, lockCtx, held.Token(), q, batch)
}

// nextTokener is a Held that can draw a new fencing token without letting go of the lock
// (locking.Lock.NextToken): a streaming hold writes several times, each write on its own token,
// since the fence accepts each token once.
type nextTokener interface {
	NextToken(ctx context.Context) (int64, error)
}

// streamHold serves a hold that keeps admitting (Config.StreamHold): the work of each admitted
// purchase starts at once, and the purchases whose work has completed are written together
// while the others work. Buyers who arrive during the hold are admitted while it is younger
// than the stream window, its lock is held and they fit beside the units already admitted; each
// write's buyers are answered as soon as it is decided. Each write after the first draws a new
// fencing token from the lock (the fence accepts each token once, and in order). The hold ends
// once no purchase is left working; it returns the number of orders written.
func (s *coalesced) streamHold(ctx, lockCtx context.Context, held Held, nt nextTokener, q *itemQueue, batch []*waiter) (written int, windowClosed bool) {
	finished := make(chan *waiter, s.maxBatch)
	working, reserved := 0, 0
	start := func(ws []*waiter) {
		for _, w := range ws {
			working++
			reserved += w.p.quantity
			go func() { // owner: streamHold, which receives from every one it starts
				if w.p.work > 0 {
					w.workErr = s.work(held.Context(w.ctx), w.p)
				}
				finished <- w
			}()
		}
	}
	start(batch)
	window := time.NewTimer(s.stream)
	defer window.Stop()
	open, lost := true, lockCtx.Done()
	token := held.Token()
	for working > 0 {
		select {
		case w := <-finished:
			ready := []*waiter{w}
		more:
			for {
				select {
				case w := <-finished:
					ready = append(ready, w)
				default:
					break more
				}
			}
			working -= len(ready)
			for _, w := range ready {
				reserved -= w.p.quantity
			}
			if token <= q.fence { // this hold has written with it: draw the next
				next, err := nt.NextToken(lockCtx)
				if err == nil {
					token = next
				} else {
					// The lock is lost, Redis failed, or this lock cannot draw tokens: the
					// fence refuses the used token below, and nobody more is admitted.
					open = false
				}
			}
			replies, n := s.write(ctx, lockCtx, token, q, ready)
			written += n
			for _, r := range replies {
				r.w.answer(r.rec, r.err)
			}
		case <-q.wake:
		case <-window.C:
			open, windowClosed = false, true
		case <-lost:
			open, lost = false, nil
		}
		if open && ctx.Err() == nil && lockCtx.Err() == nil {
			start(s.admit(q, q.stock-reserved, s.maxBatch-working))
		}
	}
	return written, windowClosed
}

// write writes the purchases of batch whose work completed, under the hold; it returns the
// batch's answers and the number of orders written.
func (s *coalesced) write(ctx, lockCtx context.Context, token int64, q *itemQueue, batch []*waiter) ([]reply, int) {
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
		return replies, 0
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
	// over: purchases a re-admission left out for want of the units the purchases kept before
	// them take. They are answered once the write is decided: refused against the stock that
	// write left, or with the write's own error (nothing was written for anyone).
	var over []*waiter
	answerOver := func(remaining int, err error) {
		for _, w := range over {
			if err == nil {
				err := checkStock(q.id, remaining, w.p.quantity)
				if err == nil {
					// It fits after all (purchases before it replayed an existing order and
					// wrote nothing): nothing was written for it; Service.run serves it again.
					err = fmt.Errorf("%w: item %d: left out of its hold's write, nothing was written", ErrLockLost, q.id)
				}
				replies = append(replies, reply{w: w, err: err})
				continue
			}
			replies = append(replies, reply{w: w, err: err})
		}
	}
	for attempt := 0; len(ready) > 0; attempt++ {
		ps := make([]purchase, len(ready))
		for i, w := range ready {
			ps[i] = w.p
		}
		res, err := s.store.writeOrders(ctx, q.id, ps, s.name, token)
		// A short stock the hold did not read: another writer without the lock took stock.
		moved := errors.Is(err, ErrSoldOut) || errors.Is(err, ErrInsufficientStock) || errors.Is(err, errRaced)
		switch {
		case err == nil:
			written := 0
			remaining := q.stock
			for i, w := range ready {
				if res[i].err == nil { // event point: order written
					written++
					q.stock -= w.p.quantity
					remaining = res[i].rec.Remaining
				}
				replies = append(replies, reply{w: w, rec: res[i].rec, err: res[i].err})
			}
			q.fence = token
			answerOver(remaining, nil)
			return replies, written
		case moved && attempt < maxReadmits && lockCtx.Err() == nil:
			// Another writer took stock since the read: read again and admit again under the
			// same hold, instead of refusing buyers who still fit.
			at := time.Now()
			r, rerr := s.store.readFast(lockCtx, q.id)
			if rerr != nil {
				err = rerr
				break
			}
			q.stock, q.read, q.readAt = r.Stock, r.Stock, at
			var more []*waiter
			ready, more = readmit(q.id, r.Stock, append(ready, over...), &replies)
			over = more
			if len(ready) == 0 {
				answerOver(r.Stock, nil) // none fits beside another: refused on the stock read
				over = nil
			}
			continue
		case moved && lockCtx.Err() != nil && ctx.Err() == nil:
			err = fmt.Errorf("%w: item %d: lock lost before the write", ErrLockLost, q.id)
		case moved:
			err = fmt.Errorf("%w: item %d: the stock kept changing under the lock", ErrUnavailable, q.id)
		}
		// Event point: a fence refusal (ErrLockLost) or an error; nothing was written.
		for _, w := range ready {
			replies = append(replies, reply{w: w, err: err})
		}
		answerOver(0, err)
		return replies, 0
	}
	return replies, 0
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

// lifecycle owns the coalescing workers of a Service: Close cancels ctx (a lock wait or read
// in progress ends) and waits for them.
type lifecycle struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newLifecycle() *lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifecycle{ctx: ctx, cancel: cancel}
}

// add registers a worker about to start; false once closed.
func (l *lifecycle) add() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

func (l *lifecycle) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
}
