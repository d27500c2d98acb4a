// Package pitfalls holds the broken Redis locks that accounts of distributed locking walk
// through before the right one, and the Redis stock mirror of the lockless demo strategies.
// The storefront wires them only with --demo: they exist to be seen failing next to their
// fixes (the load test's -scenario pitfalls). Package locking stays the correct lock only.
//
// Each lock implements inventory's Locker port with its own key prefix
// (inventory.PitfallKeyPrefix), so its keys never collide with the real lock's; its keys are
// named as package locking names a lock's (locking.KeysOf):
//
//   - SetnxExpire acquires with SETNX and then EXPIRE, two commands: a holder that dies between
//     them (Crashing returns such a holder's lock) leaves a key with no TTL.
//   - DelRelease acquires with SET NX PX and releases with a plain DEL: a holder whose lease
//     ran out deletes the next holder's lock.
//   - FixedLease acquires with SET NX PX and releases with an owner-checked compare-and-delete,
//     but has no watchdog and no loss detection: work longer than the lease runs beside the
//     next holder.
//
// None of them notices a loss: Held.Context ends only on Release.
package pitfalls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// Options configure a pitfall lock. Lease and Wait are required.
type Options struct {
	KeyPrefix string        // e.g. inventory.PitfallKeyPrefix(inventory.StrategyFixedLease)
	Lease     time.Duration // the fixed lease (no renewal)
	Wait      time.Duration // longest wait for a held lock
	Poll      time.Duration // interval between attempts while waiting; default 5ms
}

// kind is how one of the broken locks acquires and releases.
type kind int

const (
	kindSetnxExpire kind = iota
	kindDelRelease
	kindFixedLease
)

// Locker is one of the broken locks; it implements inventory.Locker.
type Locker struct {
	rdb   redis.UniversalClient
	opts  Options
	kind  kind
	crash bool // setnx-expire only: the holder dies between SETNX and EXPIRE (Crashing)
}

var _ inventory.Locker = (*Locker)(nil)

// NewSetnxExpire returns the lock that sets its key with SETNX and its lease with a second
// command, EXPIRE; its release is owner-checked. Crashing returns the same lock whose holder
// dies between the two.
func NewSetnxExpire(rdb redis.UniversalClient, o Options) *Locker {
	return newLocker(rdb, o, kindSetnxExpire)
}

// NewDelRelease returns the lock acquired with SET NX PX (one fixed lease) and released with a
// plain DEL, which deletes whoever's lock is there.
func NewDelRelease(rdb redis.UniversalClient, o Options) *Locker {
	return newLocker(rdb, o, kindDelRelease)
}

// NewFixedLease returns the lock acquired with SET NX PX and released with an owner-checked
// compare-and-delete: correct but for the lease, which is fixed (no watchdog) and whose end
// nobody notices.
func NewFixedLease(rdb redis.UniversalClient, o Options) *Locker {
	return newLocker(rdb, o, kindFixedLease)
}

func newLocker(rdb redis.UniversalClient, o Options, k kind) *Locker {
	if o.Poll <= 0 {
		o.Poll = 5 * time.Millisecond
	}
	return &Locker{rdb: rdb, opts: o, kind: k}
}

// Crashing returns the variant of l, when l is a setnx-expire lock (NewSetnxExpire), whose
// holder dies between its SETNX and its EXPIRE: its Obtain sets the key, then fails with an
// error wrapping inventory.ErrUnavailable, never sends the EXPIRE and never releases, so the
// key stays with no TTL and blocks its item until someone deletes it (a catalogue reset
// does). For any other l it returns l and false.
func Crashing(l inventory.Locker) (inventory.Locker, bool) {
	pl, ok := l.(*Locker)
	if !ok || pl.kind != kindSetnxExpire {
		return l, false
	}
	c := *pl
	c.crash = true
	return &c, true
}

// Reset deletes every key under the lock's prefix (the locks and their fencing counters): the
// catalogue reset calls it (it is an inventory.Resetter; stocks are not used), so a key a
// crashed holder left without a TTL does not outlive the catalogue.
func (l *Locker) Reset(ctx context.Context, _ map[int64]int) error {
	if l.opts.KeyPrefix == "" {
		return errors.New("pitfalls: no key prefix: refusing to purge every key")
	}
	return deleteMatching(ctx, l.rdb, l.opts.KeyPrefix+"*")
}

var _ inventory.Resetter = (*Locker)(nil)

// Key returns the Redis key of the lock named name: the hash of package locking's layout,
// locking.KeysOf(prefix, name).Hash; its fencing counter is KeysOf's Fence.
func (l *Locker) Key(name string) string { return locking.KeysOf(l.opts.KeyPrefix, name).Hash }

// Obtain polls for the lock until it is free, Options.Wait has passed or ctx ends. Its fencing
// token is the next of the lock's counter (INCR): a pitfall lock takes no floor (the
// strategies over it write unconditionally, so their token only labels the order), and a
// floor above 0 is refused rather than silently not honoured.
func (l *Locker) Obtain(ctx context.Context, name string, floor int64) (inventory.Held, error) {
	if floor > 0 {
		return nil, fmt.Errorf("pitfalls: lock %s: a pitfall lock takes no token floor (asked %d)", name, floor)
	}
	keys := locking.KeysOf(l.opts.KeyPrefix, name)
	key := keys.Hash
	owner := randomOwner()
	deadline := time.Now().Add(l.opts.Wait)
	for {
		ok, err := l.try(ctx, key, owner)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %s: %w", inventory.ErrLockTimeout, key, ctx.Err())
			}
			return nil, fmt.Errorf("%w: pitfall lock %s: %w", inventory.ErrUnavailable, key, err)
		}
		if ok {
			break
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: %s still held after %s", inventory.ErrLockTimeout, key, l.opts.Wait)
		}
		t := time.NewTimer(l.opts.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %s: %w", inventory.ErrLockTimeout, key, ctx.Err())
		case <-t.C:
		}
	}
	if l.kind == kindSetnxExpire {
		if l.crash {
			// The holder dies here: its EXPIRE is never sent and it never releases.
			return nil, fmt.Errorf("%w: injected crash: the holder of %s died between SETNX and EXPIRE; the key has no TTL", inventory.ErrUnavailable, key)
		}
		if err := l.rdb.PExpire(context.WithoutCancel(ctx), key, l.opts.Lease).Err(); err != nil {
			return nil, fmt.Errorf("%w: pitfall lock %s: EXPIRE: %w", inventory.ErrUnavailable, key, err)
		}
	}
	token, err := l.rdb.Incr(context.WithoutCancel(ctx), keys.Fence).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: pitfall lock %s: token: %w", inventory.ErrUnavailable, key, err)
	}
	return &held{l: l, key: key, owner: owner, token: token}, nil
}

// try makes one attempt: SETNX for setnx-expire, SET NX PX for the others.
func (l *Locker) try(ctx context.Context, key, owner string) (bool, error) {
	if l.kind == kindSetnxExpire {
		return l.rdb.SetNX(ctx, key, owner, 0).Result() // SETNX: no TTL yet
	}
	return l.rdb.SetNX(ctx, key, owner, l.opts.Lease).Result() // SET key owner NX PX lease
}

// compareAndDelete deletes KEYS[1] only when it still holds ARGV[1].
var compareAndDelete = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// ErrNotHeld is returned by Release when the lock was no longer there (DelRelease) or no
// longer ours (the others): its lease ran out.
var ErrNotHeld = errors.New("pitfalls: lock not held at release (its lease ran out)")

// held is one obtained pitfall lock.
type held struct {
	l     *Locker
	key   string
	owner string
	token int64

	mu       sync.Mutex
	released bool
	cancels  []context.CancelFunc
}

func (h *held) Token() int64 { return h.token }

// Context ends only when the lock is released: a pitfall lock never notices that it was lost.
func (h *held) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		cancel()
	} else {
		h.cancels = append(h.cancels, cancel)
	}
	return ctx
}

// Release deletes the key: with a plain DEL for DelRelease, owner-checked for the others.
func (h *held) Release(ctx context.Context) error {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return ErrNotHeld
	}
	h.released = true
	for _, c := range h.cancels {
		c()
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var n int64
	var err error
	if h.l.kind == kindDelRelease {
		n, err = h.l.rdb.Del(ctx, h.key).Result()
	} else {
		n, err = compareAndDelete.Run(ctx, h.l.rdb, []string{h.key}, h.owner).Int64()
	}
	if err != nil {
		return fmt.Errorf("%w: pitfall lock %s: release: %w", inventory.ErrUnavailable, h.key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotHeld, h.key)
	}
	return nil
}

func randomOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// deleteMatching deletes every key matching pattern: SCAN on each master of a Cluster (a
// Cluster client's SCAN would see one node only) or on the one server, then one UNLINK per key
// (keys of different slots cannot share a command).
func deleteMatching(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteMatching(ctx, node, pattern)
		})
	}
	var keys []string
	iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Unlink(ctx, k)
		}
		return nil
	})
	return err
}
