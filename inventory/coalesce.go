package inventory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// DefaultMaxBatch is the default of Config.MaxBatch: the most purchases one lock hold sells.
const DefaultMaxBatch = 64

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

// CartHoldObserver is a HoldObserver that is also told, once per hold, how many carts it sold
// (carts coalesced at their anchor item, coalesce_cart.go; 0 when it sold none).
type CartHoldObserver interface {
	CartHold(strategy string, anchor int64, carts int)
}

// coalesced is lock+guard (and redlock+guard) when a hold may sell to several buyers
// (Config.MaxBatch > 1). In each process, the purchases of one item wait in a local queue for
// the item's worker, which owns the hold: the worker, on a context no buyer can cancel, takes
// the item's lock once (floored by the stored fence), reads the stock once, admits waiting
// purchases in arrival order while they fit (answering the others sold out or insufficient
// stock at once, with no work spent), runs the admitted purchases' work concurrently, each
// under its buyer's context joined with the lock's, and writes every completed purchase in one
// transaction (store.writeSales, the write of one purchase too). Then it releases the lock, so
// that other processes get their turn (coalesce_turns.go), and serves the next batch. The fence
// check is unchanged: one write per hold, with the hold's token, refused when a newer token has
// written. Carts wait in the same queues (coalesce_cart.go).
type coalesced struct {
	deps
	locker   Locker
	name     string
	maxBatch int
	onDown   string        // Config.OnRedisDown: sell through the guard alone when the lock service is down
	stream   time.Duration // Config.StreamHold: how long a hold admits buyers who arrive while it works
	alone    bool          // Config.StreamAlone: and it admits them for as long as nobody else wants its locks

	// arrivals counts the waiters as they arrive (waiter.seq). Whether a waiter arrived before
	// a read began is told by this count, not by the clock: two readings of a clock can be
	// equal (a coarse clock; a simulated one, which stands still while goroutines run), and a
	// waiter taken for arrived after a read that found the item sold out stayed queued for a
	// next read, the same instant again: the worker read and re-read without end.
	arrivals atomic.Uint64

	mu    sync.Mutex
	items map[int64]*itemQueue // items with a running worker
}

func newCoalesced(d deps, l Locker, name string, cfg Config) *coalesced {
	return &coalesced{deps: d, locker: l, name: name, maxBatch: cfg.MaxBatch, onDown: cfg.OnRedisDown,
		stream: cfg.StreamHold, alone: cfg.StreamAlone, items: make(map[int64]*itemQueue)}
}

// itemQueue is one item's queue and what its worker knows of the item. pending is guarded by
// coalesced.mu; the other fields belong to the worker.
type itemQueue struct {
	id      int64
	pending []*waiter     // arrival order; only the worker removes entries, from the front
	wake    chan struct{} // (1) a purchase joined pending: a streaming hold admits it

	known   bool          // stock and fence were read by this worker
	stock   int           // the stock after this worker's last read or write
	read    int           // the stock this worker's last read found
	pause   time.Duration // before the next hold: the last one kept the lock long (holdPause)
	readSeq uint64        // the arrivals counted when that read began: it is true for the purchases waiting then
	fence   int64         // the stored fence token last seen: the floor of the next token
	carts   int           // the carts the hold in progress sold
	shared  time.Time     // when a hold last had to wait for the lock: another process wants it
	span    trace.Span    // the hold in progress's lock.hold span (nil between holds): admit links its buyers
}

// waitEnd tells the observer that a single purchase's wait for a hold ended (carts are not
// observed: events are of one item's purchases).
func (s *coalesced) waitEnd(w *waiter, err error) {
	if w.cart == nil {
		s.emit(Event{Kind: EventWaitEnd, ItemID: w.p.itemID, Strategy: s.name, Quantity: w.p.quantity, Err: err})
	}
}

func (s *coalesced) buy(ctx context.Context, p purchase) (Receipt, error) {
	w := &waiter{ctx: ctx, p: p, enqueued: time.Now(), seq: s.arrivals.Add(1), done: make(chan answer, 1)}
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
	if w.cart != nil {
		s.anchorOf(w)
	}
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
		if q.pause > 0 {
			// The last hold kept the lock long (it streamed until its window closed, or its
			// batch worked) with buyers still coming: give the lock's waiters in other
			// processes (their purchases and carts of this item) the moment its release
			// message needs to reach them, or this worker would take it back first, again
			// and again, and their buyers would wait many holds (round-robin balancing).
			t := time.NewTimer(q.pause)
			q.pause = 0
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
			s.waitEnd(w, err)
			w.answer(Receipt{}, err)
		}
	}
	q.pending = append([]*waiter(nil), q.pending[n:]...)
}

// answerWaiting answers, with err, the waiters that were in the queue when the worker's last
// read began (q.readSeq) and removes them; those that arrived since stay for the next read (the
// stock may have grown in between: a hold cancelled), so that the answer is true of their wait.
func (s *coalesced) answerWaiting(q *itemQueue, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var later []*waiter
	for _, w := range q.pending {
		switch {
		case w.state.Load() == stateAbandoned:
		case w.seq > q.readSeq:
			later = append(later, w)
		default:
			w.p.spent.addLock(time.Since(w.enqueued))
			s.waitEnd(w, err)
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
		at := s.arrivals.Load()
		r, err := s.store.readFast(ctx, q.id)
		if err != nil {
			s.answerFront(q, -1, err)
			return
		}
		q.known, q.stock, q.read, q.readSeq, q.fence = true, r.Stock, r.Stock, at, r.FenceToken
		if err := checkStock(q.id, r.Stock, 1); err != nil {
			s.answerWaiting(q, err) // sold out: event point of every refused buyer
			return
		}
	}
	// The hold's trace: lock.hold, the root (the worker's context carries no request),
	// linked to each buyer it admits (admit); the lock's wait, the hold's reads, writes and
	// releases are its children.
	ctx, span := s.trace.start(ctx, SpanLockHold)
	q.span = span
	var hl *holdLocks
	defer func() {
		q.span = nil
		if hl != nil {
			holdEnded(span, hl.anchor)
		} else {
			span.End()
		}
	}()
	var got time.Time // when the anchor's lock was taken
	waited := false   // it had to wait for it: another process held it
	hl, answered := s.takeStarving(ctx, q)
	if answered {
		return
	}
	s.mu.Lock()
	n := len(q.pending) // the purchases this hold is taken for
	s.mu.Unlock()
	if hl == nil {
		asked := time.Now()
		wctx, wspan := s.trace.start(ctx, SpanLockWait)
		held, err := s.obtainInTurn(wctx, q.id, q.fence)
		waitEnded(wspan, q.id, held, err)
		got = time.Now()
		if err != nil {
			failed(span, err)
			s.obtainFailed(q, n, err)
			return
		}
		waited = heldWaited(held, got.Sub(asked))
		hl = &holdLocks{anchor: held, others: make(map[int64]*otherLock)}
	}
	if waited {
		q.shared = got // other processes want the lock too
	}
	held := hl.anchor
	holdStarted(span, q.id, held, waited)
	q.carts = 0
	var replies []reply
	written := 0
	defer func() {
		// Release first, then answer the batch: once a buyer has its answer, the hold that
		// served it is over (and other processes may have their turn).
		s.releaseAll(ctx, hl)
		if span.IsRecording() {
			span.SetAttributes(AttrBuyers.Int(written), AttrCarts.Int(q.carts))
		}
		if s.holds != nil {
			s.holds.Hold(s.name, q.id, written)
			if co, ok := s.holds.(CartHoldObserver); ok {
				co.CartHold(s.name, q.id, q.carts)
			}
		}
		for _, r := range replies {
			r.send()
		}
	}()
	token := held.Token()
	lockCtx := held.Context(ctx)

	at := s.arrivals.Load()
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
	q.known, q.stock, q.read, q.readSeq, q.fence = true, r.Stock, r.Stock, at, r.FenceToken
	if r.FenceToken >= token {
		// A token the database has already seen (Redis lost its counter and the floor we
		// passed was older than the row): the fenced write would be refused. Refuse before
		// any work; Service.run retries each purchase once, under a new hold floored by the
		// fence just read. Event point: fence refusal.
		stale := &staleFenceError{itemID: q.id, token: token, seen: r.FenceToken}
		fenceRefused(span, stale)
		s.answerFront(q, n, stale)
		return
	}
	batch := s.takeOthers(ctx, q, hl, s.admit(q, r.Stock, s.maxBatch))
	if len(batch) == 0 {
		return
	}
	// StreamAlone: a hold that nobody else wants as it begins streams (and stops admitting
	// once it is wanted); one already wanted sells the batch it was taken for. A hold that
	// had to wait for its lock, or whose worker did lately, is not asked: other processes
	// take turns with it (round-robin balancing), and asking would cost every hold a round trip.
	if nt, ok := held.(nextTokener); ok && (s.stream > 0 || s.alone && s.uncontested(q) && s.wanted(lockCtx, q, hl.locks()) == 0) {
		var yield bool
		written, yield, replies = s.streamHold(ctx, lockCtx, hl, nt, q, batch)
		if yield && !s.inTurn() {
			q.pause = streamYield
		}
		return
	}
	replies, written = s.sell(ctx, lockCtx, hl, q, batch)
	s.pauseAfter(q, batch, got, waited)
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
	s.degradeAll(q, front, err)
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
			if w.seq <= q.readSeq {
				w.p.spent.addLock(now.Sub(w.enqueued))
				s.waitEnd(w, err)
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
		if w.cart == nil { // a cart's wait ends once its other locks are taken (takeOthers)
			w.p.spent.addLock(now.Sub(w.enqueued))
			s.waitEnd(w, nil)
		}
		stock -= w.p.quantity
		w.admitted.Store(true)
		batch = append(batch, w)
		linkServed(q.span, w)
	}
	q.pending = append(next, q.pending[i:]...)
	return batch
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
