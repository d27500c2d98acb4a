package locking

import (
	"context"
	"errors"
	"fmt"
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
	contexts contexts // the live contexts from Context
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
	return l.h.token.Load()
}

// Lease returns how long the lock lives in Redis without a renewal (its Client's
// Options.Lease). Zero for nil.
func (l *Lock) Lease() time.Duration {
	if l == nil {
		return 0
	}
	return l.h.c.lease
}

// Renewals returns how many times the watchdog has renewed the lease so far (0 with the
// watchdog off). A re-entered lock shares its outer lock's count. Zero for nil.
func (l *Lock) Renewals() int64 {
	if l == nil {
		return 0
	}
	return l.h.renewals.Load()
}

// ErrNoNextToken is NextToken's error for a lock whose kind draws no more tokens during a
// hold (Redlock, whose token is not one counter's; a semaphore permit).
var ErrNoNextToken = errors.New("locking: this kind of lock issues one fencing token per hold")

// NextToken issues the hold a new fencing token, strictly greater than every token issued for
// the key so far, without letting go of the lock, and returns it; Token returns it from then
// on (for every handle of a re-entered hold). It is for a holder that writes several times
// under one hold to a store whose fence accepts each token once: each write takes its own
// token, in order. It fails with ErrNotHeld once this Lock is released, with ErrLost when the
// lock is found lost (the loss is then declared as the watchdog would: Done closes, contexts
// end), with ErrNoNextToken for a kind that cannot, or with Redis's error (the lock is then
// still held, and a token may have been drawn and never used: tokens may skip, never repeat).
func (l *Lock) NextToken(ctx context.Context) (int64, error) {
	if err := l.Err(); err != nil {
		return 0, err
	}
	h := l.h
	if h.kind.refence == nil {
		return 0, ErrNoNextToken
	}
	cctx, cancel := context.WithTimeout(ctx, h.c.callTimeout)
	defer cancel()
	token, err := h.kind.refence(cctx, h)
	if err != nil {
		return 0, fmt.Errorf("locking: next token of %q: %w", h.k.name, err)
	}
	if token < 0 {
		h.lose(fmt.Errorf("%w: %w", ErrLost, errTaken))
		return 0, ErrLost
	}
	for { // concurrent calls: Token keeps the greatest
		cur := h.token.Load()
		if token <= cur || h.token.CompareAndSwap(cur, token) {
			break
		}
	}
	return token, nil
}

// Waiters counts the other Obtains that wait for the key now: those of any client whose last
// attempt found the key taken (each recorded its owner in the key's waiting set, P{K}:waiting,
// until a little after the lease that attempt saw, when it tries again; it leaves the set when
// it takes the lock or gives up), and at least one when a waiter of this Client is queued for
// it, and the ObtainFairs queued for the key (a fair lock's waiters are the same). Waiters of one Client queued behind its first are
// not counted until they try, so the count is close to the number of processes waiting. A
// holder that could keep the lock for long, serving its own callers one after another, asks it
// to know when to let go, and how many turns to leave to others (inventory's streaming holds
// do). It is a hint, not a promise: a waiter may arrive or leave right after the answer, one
// that died counts until its entry lapses, and TryObtain never waits, so it never counts. It
// fails with ErrNotHeld once this Lock is released or lost, with an error wrapping
// errors.ErrUnsupported for Redlock and the semaphore, or with Redis's error.
func (l *Lock) Waiters(ctx context.Context) (int, error) {
	if err := l.Err(); err != nil {
		return 0, err
	}
	h := l.h
	if h.kind.waiters == nil {
		return 0, fmt.Errorf("locking: waiters of %q: %w", h.k.name, errors.ErrUnsupported)
	}
	cctx, cancel := context.WithTimeout(ctx, h.c.callTimeout)
	defer cancel()
	n, err := h.kind.waiters(cctx, h)
	if err != nil {
		return 0, fmt.Errorf("locking: waiters of %q: %w", h.k.name, err)
	}
	return n, nil
}

// Waited reports whether the Obtain that took the lock had to wait for it: its first attempt
// found the key taken (or this Client's waiters queued for it), and it took the key on a later
// one. False for a lock taken at once, a re-entered one, and nil. A holder that waited knows
// that others take the key too (another process just held it), without asking Redis.
func (l *Lock) Waited() bool {
	return l != nil && l.h.waited
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
		l.contexts.add(&h.mu, ctx, cancel)
	}
	return ctx
}

// TTL returns the remaining lease of the lock in Redis. It returns ErrNotHeld if the lock was
// released, lost, or is no longer ours in Redis, and a Redis error otherwise.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil || l.Err() != nil {
		return 0, ErrNotHeld
	}
	return l.h.kind.ttl(ctx, l.h)
}
