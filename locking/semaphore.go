package locking

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed semaphore_acquire.lua
	semAcquireLua    string
	semAcquireScript = redis.NewScript(semAcquireLua)

	//go:embed takeover_semaphore.lua
	takeoverSemLua    string
	takeoverSemScript = redis.NewScript(include(takeoverSemLua, "semaphore_acquire.lua", semAcquireLua))

	//go:embed semaphore_renew.lua
	semRenewLua    string
	semRenewScript = redis.NewScript(semRenewLua)

	//go:embed semaphore_release.lua
	semReleaseLua    string
	semReleaseScript = redis.NewScript(semReleaseLua)

	//go:embed semaphore_ttl.lua
	semTTLLua    string
	semTTLScript = redis.NewScript(semTTLLua)
)

// Semaphore is an expiring counting semaphore: at most N holders of a permit per key at
// once, across processes. Each permit has a random id and a lease; the watchdog renews it
// while held (as a Lock's), and the permit of a holder that crashed or stopped renewing comes
// back when its lease runs out. Fairness among acquirers follows the fair semaphore of
// "Redis in Action": a ticket from a counter orders them, and all time is the Redis server's
// clock (read inside the scripts), so a client with a skewed clock cannot steal a permit.
//
// A permit is a *Lock with the same Done, Err, Context, Release and TTL, but no fencing
// token (Token returns 0: N holders at once cannot be fenced) and no re-entry: Acquire under
// a context carrying a permit takes another permit. Waiters sleep until a permit is released
// (a message on the key's channel) or the first held permit's lease runs out, or poll in
// spin mode (Options.Spin).
//
// Redis layout: two sorted sets, a ticket counter and a release channel, under the key's
// hash tag (see KeysOf).
type Semaphore struct {
	c       *Client // its own: options, hooks, the subscription of waiters
	permits int
	kind    *kind
	checks  sync.Map // key -> *atomic.Int64: when a takeover check of its permits is due next (unix ns)
}

// NewSemaphore returns a semaphore of permits permits per key over rdb (fewer than 1 counts
// as 1). opts are a Client's: Lease, DisableWatchdog, Wait, CallTimeout, KeyPrefix, Logger,
// Hooks (Acquired with token 0) and Spin apply; Replicas does not. It never fails.
func NewSemaphore(rdb redis.UniversalClient, permits int, opts *Options) *Semaphore {
	s := &Semaphore{c: New(rdb, opts), permits: max(permits, 1)}
	s.c.replicas = 0 // Options.Replicas applies to locks, not to permits
	s.kind = &kind{reentry: reenterNever, release: s.release, forget: s.forget, ttl: s.ttl, renew: s.renew,
		debt: func(h *hold) func(context.Context) error { return s.returnPay(h.k, h.owner) }}
	return s
}

// Permits returns N, the number of permits per key.
func (s *Semaphore) Permits() int { return s.permits }

// Acquire returns a permit of key, waiting while all N are held, until one is free, ctx
// ends, or the wait limit (Options.Wait, WithWait) passes; WithFloor is ignored. It returns
// ErrNotObtained when the wait ended (joined with ctx.Err() when ctx ended it), ErrClosed
// after Close, ErrEmptyKey for the key "", and any other error when Redis failed. A permit taken by a call whose reply
// was lost (ctx ended mid-call) is given back before Acquire returns.
//
// WithTakeover makes the permit name this process and lets the wait take back, about one
// ProcessTTL after a process died, the permits of that process that were taken with
// WithTakeover too, instead of waiting for their lease (as the lock does: takeover.go). A
// permit protects no data, so this is safe for any caller; a process frozen for ProcessTTL
// may find its permit gone at its next renewal (ErrLost), and N+1 may run meanwhile.
func (s *Semaphore) Acquire(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	cfg := s.c.obtainConfigFor(true, opts)
	return s.acquire(ctx, key, cfg.wait, cfg.takeover)
}

// TryAcquire is Acquire without waiting: one attempt. It returns ErrNotObtained if all N
// permits are held, ErrClosed after Close, ErrEmptyKey for the key "", and a Redis error
// otherwise.
func (s *Semaphore) TryAcquire(ctx context.Context, key string) (*Lock, error) {
	return s.acquire(ctx, key, 0, false)
}

// Close stops the subscription goroutine of the semaphore's waiters. Held permits are not
// released. It always returns nil.
func (s *Semaphore) Close() error { return s.c.Close() }

func (s *Semaphore) acquire(ctx context.Context, key string, limit time.Duration, takeover bool) (*Lock, error) {
	if l, done, err := s.c.enter(ctx, key, s.kind); done {
		return l, err
	}
	if takeover {
		if err := s.c.startHeartbeat(ctx); err != nil {
			return nil, err
		}
	}
	k := s.keysFor(key)
	id := newOwner()
	if takeover {
		id = s.c.ownerFor(true)
	}
	start := time.Now()
	return s.c.obtainKind(ctx, s.kind, k.channel, limit, func(ctx context.Context) (*Lock, time.Duration, error) {
		s.c.settle(ctx, k) // permits given back that did not reach Redis (debts.go)
		cctx, cancel := context.WithTimeout(ctx, s.c.callTimeout)
		defer cancel()
		script, args := semAcquireScript, []any{id, s.c.lease.Milliseconds(), strconv.Itoa(s.permits)}
		if dead := s.deadPermits(ctx, k, takeover); len(dead) > 0 {
			script = takeoverSemScript
			for _, d := range dead {
				args = append(args, d)
			}
		}
		sent := time.Now()
		res, err := script.Run(cctx, s.c.rdb, append(semKeys(k), k.gone(id)), args...).Int64Slice()
		if err != nil {
			return nil, 0, s.c.attemptFailed(ctx, cctx, sent, err, fmt.Sprintf("acquire permit %q", key),
				func(ctx context.Context) { s.giveBack(ctx, k, id) })
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("locking: acquire permit %q: unexpected reply %v", key, res)
		}
		if res[0] == -1 {
			return nil, 0, errors.Join(ErrNotObtained, errAbandoned)
		}
		if res[0] != 1 {
			hint := time.Duration(max(res[1], 1)) * time.Millisecond // PTTL 0: under 1 ms; 0 would be "no hint"
			if takeover {
				hint = min(hint, max(time.Until(s.nextCheck(key)), time.Millisecond))
			}
			return nil, hint, nil
		}
		return s.c.newHold(k, id, 0, s.kind, sent, start), 0, nil
	})
}

// nextCheck returns when the next takeover check of key's permits is due in this process.
func (s *Semaphore) nextCheck(key string) time.Time {
	v, _ := s.checks.LoadOrStore(key, new(atomic.Int64))
	return time.Unix(0, v.(*atomic.Int64).Load())
}

// deadPermits returns the permits of k held by dead processes, when a takeover check of k is
// due: at most one every ProcessTTL/3 per key and process, whoever waits. Unlike a lock's
// waiter (takeover.go), it does not first wait one ProcessTTL itself: admission waits are far
// shorter (100ms), and a check costs one ZRANGE of at most N permits plus one EXISTS per
// process they name.
func (s *Semaphore) deadPermits(ctx context.Context, k keys, reclaim bool) []string {
	if !reclaim {
		return nil
	}
	v, _ := s.checks.LoadOrStore(k.name, new(atomic.Int64))
	next := v.(*atomic.Int64)
	now := time.Now()
	due := next.Load()
	if now.UnixNano() < due || !next.CompareAndSwap(due, now.Add(s.c.processTTL/3).UnixNano()) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.c.callTimeout)
	defer cancel()
	ids, err := s.c.rdb.ZRange(cctx, k.hash, 0, -1).Result()
	if err != nil {
		return nil
	}
	dead := (&takeover{c: s.c}).deadOf(cctx, ids)
	if len(dead) > 0 {
		s.c.log.Info("locking: taking back the permits of a dead process", "key", k.name, "permits", len(dead))
	}
	return dead
}

// releaseID gives permit id back. abandon, for the clean-up of a call whose reply was lost,
// also leaves the id's tombstone for one lease: the call may still be on its way to Redis (on
// another connection, which Redis may serve after this one), and then it takes nothing.
func (s *Semaphore) releaseID(ctx context.Context, k keys, id string, abandon bool) (int64, error) {
	ks := []string{k.hash, k.fence}
	if abandon {
		ks = append(ks, k.gone(id))
	}
	return semReleaseScript.Run(ctx, s.c.rdb, ks, id, k.channel, s.c.lease.Milliseconds()).Int64()
}

func (s *Semaphore) release(ctx context.Context, h *hold, _ bool) (int64, error) {
	return s.releaseID(ctx, h.k, h.owner, false)
}

func (s *Semaphore) forget(ctx context.Context, h *hold) {
	cctx, cancel := s.c.bestEffort(ctx)
	defer cancel()
	s.giveBack(cctx, h.k, h.owner)
}

// giveBack is the clean-up of permit id (releaseID with its tombstone): after an attempt
// whose reply was lost, or a loss. When the call does not reach Redis the semaphore's Client
// owes it (debts.go).
func (s *Semaphore) giveBack(ctx context.Context, k keys, id string) {
	pay := s.returnPay(k, id)
	s.c.debts.owe(k, id, pay(ctx), pay)
}

// returnPay is giveBack's call, as a debt.
func (s *Semaphore) returnPay(k keys, id string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := s.releaseID(ctx, k, id, true)
		return err
	}
}

func (s *Semaphore) ttl(ctx context.Context, h *hold) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, s.c.callTimeout)
	defer cancel()
	ms, err := semTTLScript.Run(cctx, s.c.rdb, []string{h.k.hash}, h.owner).Int64()
	if err != nil {
		return 0, fmt.Errorf("locking: ttl of permit %q: %w", h.k.name, err)
	}
	if ms < 0 {
		return 0, ErrNotHeld
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (s *Semaphore) renew(ctx context.Context, h *hold) (bool, error) {
	n, err := semRenewScript.Run(ctx, s.c.rdb, semKeys(h.k), h.owner, s.c.lease.Milliseconds()).Int64()
	return n == 1, err
}
