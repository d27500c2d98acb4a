package locking

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// kind is what one lock kind does differently: the core lock, the fair lock, Redlock and the
// semaphore each have one kind value, and every hold points to its kind. Everything else
// (hold, Lock, Release, the hooks, the watchdog, the wait) is shared by all kinds. Each
// kind's acquire attempt is the closure it hands to Client.obtainKind (obtain.go).
type kind struct {
	// reentry is what Obtain does under a context that carries a hold of the same Client
	// on the same key (see Client.enter).
	reentry reentry
	// queueBehind: an Obtain that would wait first queues behind this Client's waiters of
	// the key's channel instead of trying at once, so that it does not overtake them.
	queueBehind bool
	// refuse, when not nil, is returned by every Obtain of a non-empty key before anything
	// else (Redlock without nodes: ErrNoNodes).
	refuse error

	// release gives up one hold (last: the final handle, see Lock.Release) and returns the
	// holds left in Redis (0: deleted) or -1 when the lock is not ours any more.
	release func(ctx context.Context, h *hold, last bool) (int64, error)
	// forget deletes every hold of h if still ours, best effort, after a loss; ctx may have
	// ended (the call is bounded by CallTimeout only).
	forget func(ctx context.Context, h *hold)
	// ttl returns the remaining lease, ErrNotHeld when not ours, or a Redis error.
	ttl func(ctx context.Context, h *hold) (time.Duration, error)
	// renew is the watchdog's renewal (see watchdog.renew).
	renew func(ctx context.Context, h *hold) (bool, error)
	// debt, when not nil, returns the clean-up a Client owes (debts.go) when h's last
	// release did not reach Redis; nil for a kind that records its debts itself (Redlock,
	// per node).
	debt func(h *hold) func(context.Context) error
	// refence issues h a new fencing token if h still holds the key, or returns -1 (see
	// Lock.NextToken); nil for a kind that cannot (its tokens are not one counter's).
	refence func(ctx context.Context, h *hold) (int64, error)
	// waiters counts the other owners waiting for h's key (see Lock.Waiters); nil for a
	// kind that does not record its waiters (Redlock, the semaphore).
	waiters func(ctx context.Context, h *hold) (int, error)
}

// reentry is how a kind re-enters a hold under a context that carries it.
type reentry int

const (
	reenterNever reentry = iota // semaphore: a permit's context takes another permit
	reenterRedis                // core and fair lock: acquire.lua increments the hold count
	reenterLocal                // Redlock: the process counts the holds, Redis is not called
)

// coreKind is the core lock's kind: fair_release.lua (release.lua and the fair queue's
// wake-up), renew.lua and ttl.lua on the Client's Redis; its acquire attempt is Client.acquire
// (obtain.go, acquire.lua).
func (c *Client) coreKind() *kind {
	return &kind{
		reentry:     reenterRedis,
		queueBehind: true,
		release: func(ctx context.Context, h *hold, last bool) (int64, error) {
			// fair_release.lua, not release.lua alone: the last release also wakes the head
			// of the key's fair queue, if an ObtainFair waits behind this plain holder.
			return c.fairScript(ctx, h.k, h.owner, last, false, false)
		},
		forget: func(ctx context.Context, h *hold) { c.forget(ctx, h.k, h.owner) },
		debt:   func(h *hold) func(context.Context) error { return c.forgetPay(h.k, h.owner) },
		ttl:    c.ttl,
		renew:  c.renew,
		refence: func(ctx context.Context, h *hold) (int64, error) {
			return refenceScript.Run(ctx, c.rdb, []string{h.k.hash, h.k.fence}, h.owner).Int64()
		},
		waiters: func(ctx context.Context, h *hold) (int, error) {
			// The Obtains that wait, and the ObtainFairs queued behind this plain holder
			// (its release wakes them too).
			n, err := c.waitersIn(ctx, h.owner, h.k.waiting(), h.k.fair().timeouts)
			// A waiter of this Client queued behind another of its waiters has not tried
			// yet, so it may not be in the waiting set: the notifier knows it.
			if err == nil && n == 0 && c.notify.queued(h.k.channel) {
				n = 1
			}
			return n, err
		},
	}
}

// waitersIn counts the entries other than owner's in sets, sorted sets of waiting owners
// scored by when each one's interest lapses, whose interest has not lapsed (waiters.lua).
func (c *Client) waitersIn(ctx context.Context, owner string, sets ...string) (int, error) {
	n, err := waitersScript.Run(ctx, c.rdb, sets, owner).Int64()
	return int(n), err
}

// renew extends the lease of h if h still holds the key (renew.lua). Under Options.Replicas
// the renewal is WAITed for on its connection: too few acknowledgements make it a failed
// renewal (an error), so the watchdog's loss deadline stays that of the last acknowledged one.
func (c *Client) renew(ctx context.Context, h *hold) (bool, error) {
	sc, conn, err := c.scripterFor(ctx, h.k.hash)
	if err != nil {
		return false, err
	}
	defer closeConn(conn)
	n, err := renewScript.Run(ctx, sc, []string{h.k.hash}, h.owner, c.lease.Milliseconds()).Int64()
	c.reloadOnMoved(err)
	if err != nil || n != 1 || conn == nil {
		return n == 1, err
	}
	if err := c.waitReplicas(ctx, conn); err != nil {
		return false, fmt.Errorf("renew %q: %w", h.k.name, err)
	}
	return true, nil
}

// ttl returns the remaining lease of h in Redis (ttl.lua), ErrNotHeld if not ours.
func (c *Client) ttl(ctx context.Context, h *hold) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	ms, err := ttlScript.Run(cctx, c.rdb, []string{h.k.hash}, h.owner).Int64()
	if err != nil {
		return 0, fmt.Errorf("locking: ttl of %q: %w", h.k.name, err)
	}
	if ms < 0 {
		return 0, ErrNotHeld
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// forget deletes the lock if owner still holds it: after an attempt whose reply was lost
// (it may have taken the lock), or after a loss that left the key in Redis. Best effort,
// bounded by CallTimeout only: ctx may have ended, which is what made the reply go missing.
// It leaves owner's tombstone (forgetPay: fair_release.lua's clean-up): the lost call may
// not have reached Redis yet (Redis may serve this call's connection first), and when it
// does it takes nothing.
func (c *Client) forget(ctx context.Context, k keys, owner string) {
	cctx, cancel := c.bestEffort(ctx)
	defer cancel()
	pay := c.forgetPay(k, owner)
	c.debts.owe(k, owner, pay(cctx), pay) // paid before this Client's next attempt on k
}

// errAbandoned is the answer of an acquire whose owner's tombstone exists (left by a
// clean-up: fair_release.lua's for the core lock, forget.lua on Redlock's nodes). Only a call
// that reaches Redis after its own clean-up sees it, and nobody waits for that reply.
var errAbandoned = errors.New("locking: owner given up and cleaned up")
