package inventory

import (
	"context"
	"sync"
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

// streamHold serves a hold that keeps admitting (Config.StreamHold): the work of each admitted
// purchase starts at once, and the purchases whose work has completed are written together
// while the others work. Buyers who arrive during the hold are admitted while it is younger
// than the stream window, its lock is held and they fit beside the units already admitted; each
// write's buyers are answered as soon as it is decided. Each write after the first draws a new
// fencing token from the lock (the fence accepts each token once, and in order). The hold ends
// once no purchase is left working; it returns the number of orders written.
func (s *coalesced) streamHold(ctx, lockCtx context.Context, hl *holdLocks, nt nextTokener, q *itemQueue, batch []*waiter) (written int, windowClosed bool) {
	held := hl.anchor
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
			replies, n := s.write(ctx, lockCtx, hl, token, q, ready)
			written += n
			for _, r := range replies {
				r.send()
			}
		case <-q.wake:
		case <-window.C:
			open, windowClosed = false, true
		case <-lost:
			open, lost = false, nil
		}
		if open && ctx.Err() == nil && lockCtx.Err() == nil {
			start(s.takeOthers(ctx, q, hl, s.admit(q, q.stock-reserved, s.maxBatch-working)))
		}
	}
	return written, windowClosed
}
