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
// maps locking.ErrNotObtained to ErrLockTimeout and every other failure (Redis unreachable,
// client closed) to ErrUnavailable.
func NewLocker(c *locking.Client) Locker { return redisLocker{c: c} }

type redisLocker struct{ c *locking.Client }

func (r redisLocker) Obtain(ctx context.Context, key string, floor int64) (Held, error) {
	var opts []locking.ObtainOption
	if floor > 0 {
		opts = append(opts, locking.WithFloor(floor))
	}
	l, err := r.c.Obtain(ctx, key, opts...)
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, locking.ErrNotObtained):
		return nil, fmt.Errorf("%w: %s: %w", ErrLockTimeout, key, err)
	default:
		return nil, fmt.Errorf("%w: lock service: %w", ErrUnavailable, err)
	}
}
