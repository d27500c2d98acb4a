package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockguard/stockguard/locking"
)

// Compile-time check: a *locking.Lock is a Held as it is.
var _ Held = (*locking.Lock)(nil)

// NewLocker adapts a locking.Client to Locker. Obtain passes the floor with locking.WithFloor,
// maps locking.ErrNotReplicated (the Client's Options.Replicas, --lock-replicas) to
// ErrLockNotReplicated, locking.ErrNotObtained to ErrLockTimeout and every other failure
// (Redis unreachable, client closed, Options.Replicas refused) to ErrUnavailable.
// It is also a MultiLocker (Client.ObtainMany), for carts and holds.
func NewLocker(c *locking.Client) Locker {
	// The coalesced holds take every lock in turn (ObtainInTurn, and TryObtain never ahead of
	// a queued hold of another process).
	return redisMultiLocker{redisLocker: redisLocker{obtain: c.Obtain, try: c.TryObtainFair, fair: c.ObtainFair}, many: c.ObtainMany}
}

// NewRedlockLocker adapts a locking.Redlock (a lock held on a quorum of independent Redis
// nodes) to Locker, for the redlock+guard strategy (Config.Redlock), with the same mapping as
// NewLocker (fewer than a quorum of nodes reachable is ErrUnavailable).
func NewRedlockLocker(r *locking.Redlock) Locker {
	return redisLocker{obtain: r.Obtain, try: r.TryObtain}
}

// redisLocker adapts the Obtain and TryObtain of a locking.Client or locking.Redlock.
type redisLocker struct {
	obtain, try func(ctx context.Context, key string, opts ...locking.ObtainOption) (*locking.Lock, error)
	fair        func(ctx context.Context, key string, opts ...locking.ObtainOption) (*locking.Lock, error) // nil for Redlock
	takeover    bool                                                                                       // locking.WithTakeover on every call (takeoverOf)
}

// takeoverLocker is a Locker that has a variant taking its locks with locking.WithTakeover:
// NewLocker's. lock+guard uses it (takeoverOf), because every write it makes under an item's
// lock is fenced by the lock's token and guarded by stock >= ?: a waiter may then take the
// lock of a holder whose process died within the Client's ProcessTTL (about 1s) instead of
// its lease (30s), and nothing is oversold (DESIGN §3.6). lock, whose write is not fenced,
// keeps the plain Locker and waits out the lease.
type takeoverLocker interface {
	withTakeover() Locker
}

// takeoverOf returns l's takeover variant when it has one, l otherwise (a test's fake, Redlock's:
// a Redlock waiter waits out the lease).
func takeoverOf(l Locker) Locker {
	if t, ok := l.(takeoverLocker); ok {
		return t.withTakeover()
	}
	return l
}

func (r redisMultiLocker) withTakeover() Locker {
	r.takeover = true
	return r
}

// ObtainInTurn is Obtain in first-come order across processes (locking.Client.ObtainFair): the
// lock goes to the longest waiting, so that a process that takes it again and again does not
// overtake the others (the coalesced holds of a hot item, turn after turn). Redlock has no
// queue: its Obtain.
func (r redisLocker) ObtainInTurn(ctx context.Context, key string, floor int64) (Held, error) {
	if r.fair == nil {
		return r.take(ctx, r.obtain, key, floor)
	}
	return r.take(ctx, r.fair, key, floor)
}

func (r redisLocker) Obtain(ctx context.Context, key string, floor int64) (Held, error) {
	return r.take(ctx, r.obtain, key, floor)
}

// TryObtain is Obtain with one attempt and no wait (a coalesced hold takes its carts' other
// locks so): ErrLockTimeout when the lock is held by another. NewLocker's takes it in turn
// (locking.Client.TryObtainFair): it also fails while a hold of another process is queued for
// the lock.
func (r redisLocker) TryObtain(ctx context.Context, key string, floor int64) (Held, error) {
	return r.take(ctx, r.try, key, floor)
}

func (r redisLocker) take(ctx context.Context, obtain func(context.Context, string, ...locking.ObtainOption) (*locking.Lock, error),
	key string, floor int64) (Held, error) {
	var opts []locking.ObtainOption
	if floor > 0 {
		opts = append(opts, locking.WithFloor(floor))
	}
	if r.takeover {
		opts = append(opts, locking.WithTakeover())
	}
	l, err := obtain(ctx, key, opts...)
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, locking.ErrNotReplicated): // before ErrNotObtained, which it is joined with
		return nil, fmt.Errorf("%w: %s: %w", ErrLockNotReplicated, key, err)
	case errors.Is(err, locking.ErrNotObtained):
		return nil, fmt.Errorf("%w: %s: %w", ErrLockTimeout, key, err)
	default:
		return nil, fmt.Errorf("%w: lock service: %w", ErrUnavailable, err)
	}
}
