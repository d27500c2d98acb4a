package inventory

import "github.com/stockguard/stockguard/locking"

// NewRedlockLocker adapts a locking.Redlock (a lock held on a quorum of independent Redis
// nodes) to Locker, for the redlock+guard strategy (Config.Redlock). Like NewLocker's,
// its Obtain passes the floor with locking.WithFloor and maps locking.ErrNotObtained to
// ErrLockTimeout and every other failure (fewer than a quorum of nodes reachable, Redlock
// closed) to ErrUnavailable.
func NewRedlockLocker(r *locking.Redlock) Locker { return redisLocker{obtain: r.Obtain} }
