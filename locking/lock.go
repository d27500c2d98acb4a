package locking

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is one hold of a lock on a key: the value Obtain returns. A Lock obtained by re-entry
// (see Client.Obtain) shares its owner token, fencing token and watchdog with the Lock it
// re-entered, and has its own Done channel and Release. Its methods are safe for concurrent
// use; all methods of a nil *Lock return ErrNotHeld or zero values.
type Lock struct {
	h *hold

	// guarded by h.mu
	done     chan struct{}
	err      error // nil while held; ErrLost or ErrNotHeld after
	cause    error // the detailed error handed to contexts from Context
	released bool
	cancels  []context.CancelCauseFunc
}

// hold is one ownership of a key in Redis: one owner token and one watchdog, shared by the
// Lock handles of a re-entered lock.
type hold struct {
	c        *Client
	k        keys
	owner    string
	token    int64
	acquired time.Time
	wd       *watchdog
	ops      *kindOps // nil for the core lock; the Redis calls of the other kinds (kind.go)

	mu      sync.Mutex
	handles int            // Lock handles not yet released; the last stops the watchdog
	live    map[*Lock]bool // handles whose Done is still open
	lost    error          // set once, when the watchdog declared the lock lost
}

func (h *hold) newHandleLocked() *Lock {
	l := &Lock{h: h, done: make(chan struct{})}
	h.handles++
	h.live[l] = true
	return l
}

// finishLocked closes l's Done and cancels its contexts, once.
func (h *hold) finishLocked(l *Lock, err, cause error) {
	if l.err != nil {
		return
	}
	l.err, l.cause = err, cause
	for _, cancel := range l.cancels { // before Done, so a closed Done implies cancelled contexts
		cancel(cause)
	}
	l.cancels = nil
	close(l.done)
	delete(h.live, l)
}

// lose is the watchdog's onLost: the Lost hook runs, then every open handle learns of the
// loss (Done closed, contexts cancelled). A Release in between returns ErrNotHeld.
func (h *hold) lose(err error) {
	h.mu.Lock()
	if h.lost != nil {
		h.mu.Unlock()
		return
	}
	h.lost = err
	h.mu.Unlock()
	h.c.log.Warn("locking: lock lost", "key", h.k.name, "token", h.token, "err", err)
	if f := h.c.hooks.Lost; f != nil {
		f(h.k.name, err)
	}
	h.mu.Lock()
	for l := range h.live {
		h.finishLocked(l, ErrLost, err)
	}
	h.mu.Unlock()
}

// Key returns the key the lock was obtained on, without the prefix ("" for nil).
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.h.k.name
}

// Token returns the fencing token: strictly greater than every token issued earlier for the
// key, by any client. A re-entered lock has its outer lock's token. Zero for nil.
func (l *Lock) Token() int64 {
	if l == nil {
		return 0
	}
	return l.h.token
}

// Done returns a channel closed when the lock is lost or this Lock is released. A nil Lock
// returns a closed channel.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return closedChan
	}
	return l.done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Err returns nil while the lock is held, ErrLost once it was lost (context.Cause of a
// context from Context tells why), and ErrNotHeld once released (and for nil).
func (l *Lock) Err() error {
	if l == nil {
		return ErrNotHeld
	}
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.err
}

// Context returns a context derived from parent that is cancelled when the lock is lost
// (cause wraps ErrLost) or this Lock is released (cause ErrNotHeld). Run the guarded work
// under it. It carries the lock: Obtain of the same key under it, or under any context
// derived from it, re-enters instead of waiting. Goroutines started with it therefore share
// the hold: they must not treat the lock as exclusive among themselves. If the lock is
// already lost or released, the context is returned cancelled. For a nil Lock it returns a
// cancelled child of parent.
func (l *Lock) Context(parent context.Context) context.Context {
	if l == nil {
		ctx, cancel := context.WithCancelCause(parent)
		cancel(ErrNotHeld)
		return ctx
	}
	h := l.h
	ctx, cancel := context.WithCancelCause(context.WithValue(parent, ctxKey{h.c, h.k.name}, h))
	h.mu.Lock()
	defer h.mu.Unlock()
	if l.err != nil {
		cancel(l.cause)
	} else {
		l.cancels = append(l.cancels, cancel)
	}
	return ctx
}

type ctxKey struct {
	c   *Client
	key string
}

// heldIn returns the hold on key that ctx carries for c, or nil.
func heldIn(ctx context.Context, c *Client, key string) *hold {
	h, _ := ctx.Value(ctxKey{c, key}).(*hold)
	return h
}

// TTL returns the remaining lease of the lock in Redis. It returns ErrNotHeld if the lock was
// released, lost, or is no longer ours in Redis, and a Redis error otherwise.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil || l.Err() != nil {
		return 0, ErrNotHeld
	}
	h := l.h
	if h.ops != nil && h.ops.ttl != nil {
		return h.ops.ttl(ctx, h)
	}
	cctx, cancel := context.WithTimeout(ctx, h.c.callTimeout)
	defer cancel()
	ms, err := ttlScript.Run(cctx, h.c.rdb, []string{h.k.hash}, h.owner).Int64()
	if err != nil {
		return 0, fmt.Errorf("locking: ttl of %q: %w", h.k.name, err)
	}
	if ms < 0 {
		return 0, ErrNotHeld
	}
	return time.Duration(ms) * time.Millisecond, nil
}
