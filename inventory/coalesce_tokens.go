package inventory

import (
	"context"
	"sync"
)

// tokenPrefetch draws the fencing tokens of a streaming hold's next write in the background,
// while a write goes on, so that the next write does not wait a round trip for them: the
// anchor's next token (NextToken), and the next tokens of the carts' other locks that the
// write used. A token drawn and not used is skipped, never repeated: the fence needs the
// tokens of a lock increasing, not consecutive. It is used by the hold's goroutine alone;
// wait, deferred, receives every draw it started.
type tokenPrefetch struct {
	ctx    context.Context // the hold's lock context
	anchor nextTokener
	hl     *holdLocks
	drawn  chan tokenDraw            // the anchor's draw in progress, or nil
	others chan map[*otherLock]int64 // the other locks' draws in progress, or nil
}

type tokenDraw struct {
	token int64
	err   error
}

// newTokenPrefetch draws the tokens of the hold whose locks are hl, anchor the anchor's, under lockCtx.
func newTokenPrefetch(lockCtx context.Context, anchor nextTokener, hl *holdLocks) *tokenPrefetch {
	return &tokenPrefetch{ctx: lockCtx, anchor: anchor, hl: hl}
}

// draw starts drawing the anchor's next token, unless a draw is in progress or unused.
func (t *tokenPrefetch) draw() {
	if t.drawn != nil {
		return
	}
	ch := make(chan tokenDraw, 1)
	t.drawn = ch
	go func() { // owner: the hold, which receives it (next or wait)
		tok, err := t.anchor.NextToken(t.ctx)
		ch <- tokenDraw{tok, err}
	}()
}

// next returns the anchor's next token: the one drawn in the background, or one drawn now.
func (t *tokenPrefetch) next() (int64, error) {
	t.draw()
	r := <-t.drawn
	t.drawn = nil
	return r.token, r.err
}

// drawOthers starts drawing the next tokens of the other locks that a write used (the fence
// accepts each token once), concurrently: one round trip for all of them.
func (t *tokenPrefetch) drawOthers() {
	if t.others != nil {
		return
	}
	var used []*otherLock
	for _, o := range t.hl.others {
		if _, can := o.held.(nextTokener); can && o.written && o.ctx.Err() == nil {
			used = append(used, o)
		}
	}
	if len(used) == 0 {
		return
	}
	ch := make(chan map[*otherLock]int64, 1)
	t.others = ch
	go func() { // owner: the hold, which receives it (applyOthers or wait)
		var mu sync.Mutex
		next := make(map[*otherLock]int64, len(used))
		var wg sync.WaitGroup
		for _, o := range used {
			wg.Go(func() { // owner: this goroutine, which waits for it
				if tok, err := o.held.(nextTokener).NextToken(t.ctx); err == nil {
					mu.Lock()
					next[o] = tok
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		ch <- next
	}()
}

// applyOthers gives the other locks the tokens drawOthers drew (waiting for the draws in
// progress): each is unused again. A lock whose draw failed keeps its used token, and a cart
// that needs it is left out of the next write (otherTokens draws once more).
func (t *tokenPrefetch) applyOthers() {
	if t.others == nil {
		return
	}
	for o, tok := range <-t.others {
		o.token, o.written = tok, false
	}
	t.others = nil
}

// wait receives the draws still in progress (their tokens go unused).
func (t *tokenPrefetch) wait() {
	if t.drawn != nil {
		<-t.drawn
	}
	if t.others != nil {
		<-t.others
	}
}
