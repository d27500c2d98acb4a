package inventory

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/stockguard/stockguard/locking"
)

// Locker is what inventory needs of a distributed lock service. NewLocker adapts the locking
// package's *locking.Client to it; tests wrap it to inject faults.
type Locker interface {
	// Obtain takes the lock on key, waiting for it as long as the lock service allows (or ctx).
	// The new lock's fencing token is greater than floor and than every token issued before
	// for key (lock+guard passes the item's stored fence token). It returns an error wrapping
	// ErrLockTimeout when the wait ended without the lock, one wrapping ErrLockNotReplicated
	// when it ended with every lock taken given back because too few Redis replicas
	// acknowledged it, and one wrapping ErrUnavailable when the lock service could not be
	// reached.
	Obtain(ctx context.Context, key string, floor int64) (Held, error)
}

// Held is one obtained lock.
type Held interface {
	// Token is the lock's fencing token.
	Token() int64
	// Context returns a context derived from parent that is cancelled when the lock is lost
	// or released.
	Context(parent context.Context) context.Context
	// Release gives the lock back; it fails if the lock was lost or already released. It must
	// reach the lock service even when ctx is already cancelled (a purchase whose client hung
	// up still frees its lock at once).
	Release(ctx context.Context) error
}

// Admission limits how many purchases of one item may be in flight (NewAdmission adapts the
// locking package's semaphore).
type Admission interface {
	// Acquire admits one purchase of itemID, or fails with an error wrapping ErrOverloaded.
	// The caller calls release once the purchase is over.
	Acquire(ctx context.Context, itemID int64) (release func(), err error)
}

// The storefront's Redis key layout, defined here once. An item's lock is named
// ItemLockName(id) ("item:42"); the locking package turns a name into its Redis keys under a
// prefix (locking.KeysOf: "stockguard:lock:{item:42}" and its ":fence" counter and
// ":released" channel, one hash tag so they share a Cluster slot).
const (
	LockKeyPrefix     = "stockguard:lock:"     // single-node item locks (lock, lock+guard)
	RedlockKeyPrefix  = "stockguard:redlock:"  // Redlock item locks (redlock+guard), on every node
	InflightKeyPrefix = "stockguard:inflight:" // the admission semaphore (Admission)
)

const itemLockPrefix = "item:"

// ItemLockName is the name of item id's lock.
func ItemLockName(itemID int64) string { return itemLockPrefix + strconv.FormatInt(itemID, 10) }

// LockKeys returns the Redis keys of the lock named name under prefix, as package locking lays
// them out: the lock's hash and its fencing counter (one hash tag, one Cluster slot). Lockers
// other than package locking's (the demo's broken locks) name their keys with it, so the layout
// is written once.
func LockKeys(prefix, name string) (hash, fence string) {
	k := locking.KeysOf(prefix, name)
	return k.Hash, k.Fence
}

// ItemOfLock returns the item whose lock is named name, or false for a lock of another kind.
func ItemOfLock(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, itemLockPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil && id > 0
}

// keyed is a set of in-process mutexes, one per key, whose waits honour a context. Entries
// are removed when nobody holds or waits for them.
type keyed[K comparable] struct {
	mu sync.Mutex
	m  map[K]*keyedEntry
}

type keyedEntry struct {
	ch   chan struct{} // holds one token while locked
	refs int           // holders and waiters
}

// lock waits for the key's mutex, or for ctx. On success the caller must call unlock.
func (k *keyed[K]) lock(ctx context.Context, key K) (unlock func(), err error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[K]*keyedEntry)
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{ch: make(chan struct{}, 1)}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()

	select {
	case e.ch <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-e.ch; k.drop(key, e) }) }, nil
	case <-ctx.Done():
		k.drop(key, e)
		return nil, ctx.Err()
	}
}

func (k *keyed[K]) drop(key K, e *keyedEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(k.m, key)
	}
}
