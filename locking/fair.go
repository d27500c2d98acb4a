package locking

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fair scripts include the core scripts (acquire.lua, release.lua) textually at their
// "--#include" line, so that the lock itself is taken and released by the same code.
var (
	//go:embed fair_acquire.lua
	fairAcquireLua    string
	fairAcquireScript = redis.NewScript(include(fairAcquireLua, "acquire.lua", acquireLua))

	//go:embed fair_release.lua
	fairReleaseLua    string
	fairReleaseScript = redis.NewScript(include(fairReleaseLua, "release.lua", releaseLua))

	//go:embed takeover_fair.lua
	takeoverFairLua    string
	takeoverFairScript = redis.NewScript(include(takeoverFairLua, "fair_acquire.lua", include(fairAcquireLua, "acquire.lua", acquireLua)))
)

// ObtainFair returns the lock on key as Obtain does, but waiters are served in arrival
// order: a waiter joins a queue in Redis (a list of owners plus a sorted set of their
// timeouts, as Redisson's fair lock), the lock goes to the head of the queue when free, and
// a release wakes the head only (one channel per waiter, no thundering herd), whether the
// holder took the lock with ObtainFair, Obtain or ObtainMany. A waiter keeps
// its place by refreshing it every QueueTimeout/3; one that vanishes (crash, partition) is
// dropped QueueTimeout after its last refresh (by default 5s, or the lease if shorter: until
// then, at the head of the queue, it holds up the waiters behind it as a vanished holder
// would for its lease), and one that gives up (ctx, wait limit)
// leaves the queue at once, so neither blocks those behind it for long.
//
// The lock is the same as Obtain's (same hash, fencing counter, tokens, lease, watchdog,
// re-entry under Lock.Context): ObtainFair and Obtain exclude each other on one key, but
// Obtain does not queue, so it can overtake fair waiters; use one or the other per key.
// Redis layout, in addition to the lock's: a queue list, a sorted set of timeouts and a
// channel per waiter (see KeysOf).
//
// It returns what Obtain returns: ErrNotObtained when the wait ended (joined with ctx.Err()
// when ctx ended it), ErrClosed after Close, ErrEmptyKey for the key "", and any other error
// when Redis failed.
func (c *Client) ObtainFair(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return c.obtainFair(ctx, key, true, opts)
}

// TryObtainFair is ObtainFair without waiting: one attempt, which succeeds only when the lock
// is free and nobody is queued for it, and never joins the queue. It returns ErrNotObtained
// otherwise, ErrClosed after Close, ErrEmptyKey for the key "", and a Redis error when Redis
// failed.
func (c *Client) TryObtainFair(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return c.obtainFair(ctx, key, false, opts)
}

// DefaultQueueTimeout is the default of Options.QueueTimeout.
const DefaultQueueTimeout = 5 * time.Second

func (c *Client) obtainFair(ctx context.Context, key string, wait bool, opts []ObtainOption) (*Lock, error) {
	if l, done, err := c.enter(ctx, key, c.fair); done {
		return l, err
	}
	cfg := c.obtainConfigFor(wait, opts)
	if cfg.takeover {
		if err := c.startHeartbeat(ctx); err != nil {
			return nil, err
		}
	}
	k := c.keysFor(key)
	fk := k.fair()
	owner := c.ownerFor(cfg.takeover)
	tk := c.newTakeover(cfg.takeover, cfg.wait != 0)
	try := "0"
	if cfg.wait == 0 {
		try = "1"
	}
	timeout := c.queueTimeout()
	start := time.Now()
	var short shortfall // Options.Replicas: an attempt whose lock no replica acknowledged
	queued := false     // an attempt's answer put this owner in the queue
	l, err := c.obtainKind(ctx, c.fair, fk.turn+owner, cfg.wait, func(ctx context.Context) (*Lock, time.Duration, error) {
		c.settle(ctx, k) // clean-ups of k that did not reach Redis (debts.go)
		sc, conn, err := c.scripterFor(ctx, k.hash)
		if err != nil {
			return nil, 0, fmt.Errorf("locking: obtain %q: %w", key, err)
		}
		defer closeConn(conn)
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
		defer cancel()
		script, args := fairAcquireScript, []any{owner, c.lease.Milliseconds(), strconv.FormatInt(cfg.floor, 10), "0", try,
			timeout.Milliseconds(), fk.turn}
		if holder, queued := tk.dead(ctx, k, true); holder != "" || len(queued) > 0 {
			script, args = takeoverFairScript, append(args, holder)
			for _, q := range queued {
				args = append(args, q)
			}
		}
		sent := time.Now()
		res, err := script.Run(cctx, sc, []string{k.hash, k.fence, k.gone(owner), fk.queue, fk.timeouts}, args...).Int64Slice()
		if err != nil {
			c.reloadOnMoved(err)
			return nil, 0, c.attemptFailed(ctx, cctx, sent, err, fmt.Sprintf("obtain %q", key),
				func(ctx context.Context) { c.fairAbandon(ctx, k, owner) })
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("locking: obtain %q: unexpected reply %v", key, res)
		}
		if res[0] == -2 {
			return nil, 0, errors.Join(ErrNotObtained, errAbandoned)
		}
		if res[0] != 1 {
			queued = queued || try == "0"
			// Come back before the place lapses, even if nobody wakes us (and, for a lock hash
			// without expiry, -1, set by hand, not at once).
			wait := timeout / 3
			if res[1] >= 0 {
				wait = min(time.Duration(max(res[1], 1))*time.Millisecond, wait) // 0 would be "no hint"
			}
			return nil, tk.failed(wait), nil
		}
		err = c.ackAcquired(ctx, conn, key, func(ctx context.Context) error {
			// Give the lock back and wake the head of the queue; this waiter joins it again.
			_, err := c.fairScript(ctx, k, owner, true, false, false)
			return err
		}, func(ctx context.Context) { c.fairAbandon(ctx, k, owner) })
		if short.note(err) {
			return nil, c.retryAfterShortfall(), nil
		}
		if err != nil {
			return nil, 0, err
		}
		return c.newHold(k, owner, res[1], c.fair, sent, start), 0, nil
	})
	err = short.result(err)
	if cfg.wait != 0 {
		// Leave the queue at once, and let the next waiter in: when an answer queued this
		// owner. An attempt whose call may have run without an answer cleaned up after itself
		// (attemptFailed); one that never reached Redis (an open breaker, a refused
		// connection) left nothing, and its caller must not wait on a clean-up call to a node
		// known to hang.
		if err != nil && queued {
			cctx, cancel := c.bestEffort(ctx)
			c.fairAbandon(cctx, k, owner)
			cancel()
		}
		c.notify.drop(fk.turn + owner)
	}
	return l, err
}

// fairKind is the fair lock's kind: the core lock's re-entry, renewal and TTL, with
// fair_release.lua, which also wakes the head of the queue, to release and forget.
func (c *Client) fairKind() *kind {
	return &kind{reentry: reenterRedis, release: c.fairRelease, forget: c.fairForget, ttl: c.ttl, renew: c.renew,
		debt: func(h *hold) func(context.Context) error { return c.fairPay(h.k, h.owner) },
		refence: func(ctx context.Context, h *hold) (int64, error) { // the core lock's hash and counter
			return refenceScript.Run(ctx, c.rdb, []string{h.k.hash, h.k.fence}, h.owner).Int64()
		},
		waiters: func(ctx context.Context, h *hold) (int, error) {
			// Its queue, and the Obtains (not fair) that wait for the same key.
			return c.waitersIn(ctx, h.owner, h.k.fair().timeouts, h.k.waiting())
		}}
}

// queueTimeout is the fair-lock waiter timeout: Options.QueueTimeout, or by default
// DefaultQueueTimeout or the lease if that is shorter (a waiter that vanished at the head of
// the queue then blocks those behind it no longer than a holder that vanished would); at least
// three call timeouts, so that a live waiter always refreshes its place in time.
func (c *Client) queueTimeout() time.Duration {
	d := c.family.queueTimeout
	if d <= 0 {
		d = min(DefaultQueueTimeout, c.lease)
	}
	return max(d, 3*c.callTimeout)
}

// fairScript runs fair_release.lua for owner: release one hold (all: every hold), or leave
// the queue. abandon, for the clean-up of an owner that gave up, also leaves its tombstone
// for one lease, so that an attempt of the owner still on its way to Redis takes nothing.
func (c *Client) fairScript(ctx context.Context, k keys, owner string, all, leave, abandon bool) (int64, error) {
	ks, args := c.fairArgs(k, owner, all, leave, abandon)
	return fairReleaseScript.Run(ctx, c.rdb, ks, args...).Int64()
}

// fairArgs are the KEYS and ARGV of fair_release.lua for owner on k (see fairScript).
func (c *Client) fairArgs(k keys, owner string, all, leave, abandon bool) ([]string, []any) {
	fk := k.fair()
	ks := []string{k.hash, fk.queue, fk.timeouts}
	if abandon {
		ks = append(ks, k.gone(owner))
	}
	return ks, []any{owner, k.channel, flag(all), fk.turn, flag(leave), c.lease.Milliseconds()}
}

func (c *Client) fairRelease(ctx context.Context, h *hold, last bool) (int64, error) {
	return c.fairScript(ctx, h.k, h.owner, last, false, false)
}

func (c *Client) fairForget(ctx context.Context, h *hold) {
	cctx, cancel := c.bestEffort(ctx)
	defer cancel()
	c.fairAbandon(cctx, h.k, h.owner)
}

// fairAbandon is the clean-up of a fair owner that gave up or lost its hold: it leaves the
// queue, drops every hold it may have and leaves its tombstone (fair_release.lua). When the
// call does not reach Redis the Client owes it (debts.go).
func (c *Client) fairAbandon(ctx context.Context, k keys, owner string) {
	pay := c.fairPay(k, owner)
	c.debts.owe(k, owner, pay(ctx), pay)
}

// fairPay is fairAbandon's call, as a debt.
func (c *Client) fairPay(k keys, owner string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.fairScript(ctx, k, owner, true, true, true)
		return err
	}
}
