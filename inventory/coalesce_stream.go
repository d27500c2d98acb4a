package inventory

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sell runs the batch's work and writes the purchases whose work completed; it returns the
// batch's answers and the number of orders written.
func (s *coalesced) sell(ctx, lockCtx context.Context, hl *holdLocks, q *itemQueue, batch []*waiter) ([]reply, int) {
	held := hl.anchor
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
	return s.write(ctx, lockCtx, hl, held.Token(), q, batch)
}

// nextTokener is a Held that can draw a new fencing token without letting go of the lock
// (locking.Lock.NextToken): a streaming hold writes several times, each write on its own token,
// since the fence accepts each token once.
type nextTokener interface {
	NextToken(ctx context.Context) (int64, error)
}

// streamHold serves a hold that keeps admitting (Config.StreamHold, Config.StreamAlone): the
// work of each admitted purchase starts at once, and the purchases whose work has completed
// are written together while the others work. Buyers who arrive during the hold are admitted
// while its lock is held, they fit beside the units already admitted, and the hold is younger
// than the stream window or (StreamAlone) nobody else wants its locks; each write's buyers are
// answered as soon as it is decided. Each write after the first draws a new fencing token from
// the lock (the fence accepts each token once, and in order), so the writes run one at a
// time; a write's transaction runs on a goroutine of its own (pendingWrite.commit), so that
// admission and the work of the next purchases go on during it. The hold ends once no purchase
// is left working or to write; it returns the number of orders written, whether it stopped
// admitting because its window closed or its locks were wanted (the worker then yields the
// lock), and the answers of its last write, which the caller gives once the locks are released.
func (s *coalesced) streamHold(ctx, lockCtx context.Context, hl *holdLocks, nt nextTokener, q *itemQueue, batch []*waiter) (written int, yield bool, last []reply) {
	held := hl.anchor
	finished := make(chan *waiter, s.maxBatch)
	// working: admitted, work not done; done: work done, waiting for the write in flight;
	// reserved: the units admitted and not yet written (all of them, and the write's).
	working, reserved := 0, 0
	var done []*waiter
	inFlight := make(map[*waiter]bool) // admitted, not yet in a write: the carts' other locks they need
	start := func(ws []*waiter) {
		for _, w := range ws {
			working++
			reserved += w.p.quantity
			inFlight[w] = true
			go func() { // owner: streamHold, which receives from every one it starts
				if w.p.work > 0 {
					w.workErr = s.work(held.Context(w.ctx), w.p)
				}
				finished <- w
			}()
		}
	}
	start(batch)
	// passed: the window is over; from then on a StreamAlone hold admits while its locks
	// are not wanted, asking after each write (at most every contentionEvery).
	var windowC <-chan time.Time
	passed := s.stream <= 0
	if !passed {
		window := time.NewTimer(s.stream)
		defer window.Stop()
		windowC = window.C
	}
	// look asks, in the background, whether the hold's locks are wanted (at most one look at
	// a time, its answer on looked): the writes go on meanwhile.
	var asked time.Time
	var looked chan int
	look := func() {
		ch, locks := make(chan int, 1), hl.locks() // the locks taken here: the loop changes hl
		asked, looked = time.Now(), ch
		go func() { ch <- s.wanted(lockCtx, q, locks) }() // owner: streamHold, which receives it
	}
	defer func() {
		if looked != nil {
			<-looked
		}
	}()
	tokens := newTokenPrefetch(lockCtx, nt, hl)
	defer tokens.wait()
	// writing: the write in flight (its result comes on it), and the units it takes.
	var writing chan writeResult
	writingUnits := 0
	open, lost := true, lockCtx.Done()
	token := held.Token()
	var spent int64 // the last token a write's transaction ran under, committed or not
	begin := func() {
		if token <= max(q.fence, spent) { // this hold has written with it: the next one
			if t, err := tokens.next(); err == nil {
				token = t
			} else {
				// The lock is lost, Redis failed, or this lock cannot draw tokens: the
				// fence refuses the used token below, and nobody more is admitted.
				open = false
			}
		}
		tokens.applyOthers() // the other locks' next tokens, drawn during the last write
		for _, w := range done {
			delete(inFlight, w)
			writingUnits += w.p.quantity
		}
		pw := s.prepare(ctx, lockCtx, hl, token, q, done)
		done = nil
		// Purchases still working will be written after this write: it is not the hold's
		// last, so its answers go as soon as it is decided, from its own goroutine.
		more := working > 0
		ch := make(chan writeResult, 1)
		writing = ch
		go func() { // owner: streamHold, which receives it
			r := pw.commit(ctx, lockCtx)
			// A write refused behind a newer token is answered by the hold once it has
			// stopped admitting: answered now, a buyer's one retry could rejoin this hold.
			if more && !r.behind() {
				for _, rp := range r.replies {
					rp.send()
				}
				r.replies = nil
			}
			ch <- r
		}()
		if open && working > 0 {
			tokens.draw()       // the next write's token, while this one goes on
			tokens.drawOthers() // and the other locks' that this one uses
		}
	}
	for working > 0 || len(done) > 0 || writing != nil {
		select {
		case w := <-finished:
			done = append(done, w)
		more:
			for {
				select {
				case w := <-finished:
					done = append(done, w)
				default:
					break more
				}
			}
			working = len(inFlight) - len(done) // inFlight: the ones working and done
		case r := <-writing:
			writing = nil
			if r.tried && !reuseTriedToken() {
				// Never again under this token, even when the write failed: had its COMMIT
				// landed with its answer lost, the fence would refuse every later write.
				spent = r.token
			}
			if r.behind() {
				// The tokens this hold draws may all be behind the fence: it stops admitting
				// (before it answers the refused buyers), and their one retry goes to the next
				// hold, whose token is floored above the fence just seen (apply).
				open = false
			}
			r.apply(q)
			written += r.written
			reserved -= writingUnits
			writingUnits = 0
			if len(done) > 0 {
				begin() // the next write first: its buyers wait for it, these have their answers
			} else if working == 0 && open && ctx.Err() == nil && lockCtx.Err() == nil {
				start(s.takeOthers(ctx, q, hl, s.admit(q, q.stock-reserved, s.maxBatch)))
			}
			if working == 0 && writing == nil {
				// Nobody is left working: the hold is over. Its last answers go once its
				// locks are released (hold's defer), as a batch's do: a buyer holding its
				// answer knows the hold that served it is over (and a process killed right
				// after answering leaves no lock behind for a lease).
				last = r.replies
				continue
			}
			s.releaseIdleOthers(ctx, q, hl, inFlight, tokens.applyOthers)
			for _, r := range r.replies {
				r.send()
			}
			if open && passed && looked == nil && time.Since(asked) >= contentionEvery {
				look()
			}
		case n := <-looked:
			looked = nil
			if n > 0 && open {
				open, yield = false, true
			}
		case <-q.wake:
		case <-windowC:
			windowC, passed = nil, true
			switch {
			case !s.alone:
				open, yield = false, true
			case looked == nil:
				look()
			}
		case <-lost:
			open, lost = false, nil
		}
		if writing == nil && len(done) > 0 {
			begin()
		}
		if open && ctx.Err() == nil && lockCtx.Err() == nil {
			start(s.takeOthers(ctx, q, hl, s.admit(q, q.stock-reserved, s.maxBatch-working-len(done))))
		}
	}
	return written, yield, last
}

// waitersCounter is a Held that can count the Obtains of other owners waiting for its key
// (locking.Lock.Waiters).
type waitersCounter interface {
	Waiters(ctx context.Context) (int, error)
}

// contentionEvery is how often at most a streaming hold past its window asks whether its
// locks are wanted: after a write, so at most once per write, and not more often than this.
const contentionEvery = 2 * time.Millisecond

// wanted tells how much the hold of q's item whose locks are locks (hl.locks: its anchor's
// first) is wanted elsewhere: the number of other Obtains waiting for its anchor's lock (about the number of processes that wait for it), at
// least 1 when one waits for a lock the hold took for a cart (asked concurrently) or when a
// cart of q's queue was left waiting maxCartSkips times for another lock (the next hold takes
// that lock first, waiting, holding nothing: takeStarving). A lock that cannot tell, or an
// error, counts as wanted: the hold then lets go, as it would without StreamAlone.
func (s *coalesced) wanted(ctx context.Context, q *itemQueue, locks []Held) int {
	s.mu.Lock()
	starving := slices.ContainsFunc(q.pending, func(w *waiter) bool {
		return w.cart != nil && w.cart.skips >= maxCartSkips && w.state.Load() != stateAbandoned
	})
	s.mu.Unlock()
	count := func(h Held) int {
		c, ok := h.(waitersCounter)
		if !ok {
			return 1
		}
		n, err := c.Waiters(ctx)
		if err != nil {
			return 1
		}
		return n
	}
	var others atomic.Bool
	var wg sync.WaitGroup
	for _, o := range locks[1:] {
		wg.Go(func() { // owner: wanted, which waits for it
			if count(o) > 0 {
				others.Store(true)
			}
		})
	}
	n := count(locks[0])
	wg.Wait()
	if n == 0 && (starving || others.Load()) {
		n = 1
	}
	return n
}

// otherIdle is how long a streaming hold keeps a cart's other lock that no cart in flight
// needs: the next carts of a hot item often share its cold items, and taking their locks again
// costs a round trip, but a hold that streams for long must not keep, one by one, the lock of
// every item its carts ever held.
const otherIdle = time.Second

// releaseIdleOthers gives back the carts' other locks of hl that no cart in
// flight needs and that no cart needed for otherIdle; a prefetched token of one is then unused.
// settle ends the draws of the other locks' next tokens still in progress first: a draw that
// reached Redis after the release would find the lock gone and report it lost.
func (s *coalesced) releaseIdleOthers(ctx context.Context, q *itemQueue, hl *holdLocks, inFlight map[*waiter]bool, settle func()) {
	now := time.Now()
	var idle []int64
	for id, o := range hl.others {
		if now.Sub(o.used) >= otherIdle {
			idle = append(idle, id)
		}
	}
	if len(idle) == 0 {
		return
	}
	for w := range inFlight {
		if w.cart != nil {
			idle = slices.DeleteFunc(idle, func(id int64) bool { return slices.Contains(w.cart.others(q.id), id) })
		}
	}
	if len(idle) > 0 {
		settle()
	}
	for _, id := range idle {
		o := hl.others[id]
		delete(hl.others, id)
		s.release(ctx, o.held)
	}
}
