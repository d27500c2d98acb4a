// Package locking is a Redis lock with a watchdog, loss detection and fencing tokens.
//
// A Client obtains locks on keys. Each Lock has its own random 128-bit owner token (its
// identity in Redis), a fencing token that strictly increases per key, and a watchdog that
// renews its lease every Lease/3 while it is held. When a renewal finds the lock gone or
// taken, or Redis stays unreachable until the lease could have run out, the holder is told at
// once: Done is closed, the contexts from Context are cancelled, and Err returns ErrLost.
// Release stops the watchdog, waits for it, then deletes the key with a compare-and-delete
// script and publishes on the key's channel; waiters are woken by that message (one shared
// subscription per Client), with the remaining lease of the failed attempt as the longest
// sleep should the message be missed.
//
// Redis layout, for key K and prefix P (default "lock:"): the lock hash P{K}, its fencing
// counter P{K}:fence and its release channel P{K}:released, all under the one hash tag {K}
// so that a lock lives in one Cluster slot; KeysOf builds them and documents the names of
// every kind.
//
// Every Redis call is bounded by Options.CallTimeout through a context deadline. go-redis
// v9 only honours context deadlines when the client is built with
// redis.Options.ContextTimeoutEnabled (likewise ClusterOptions, RingOptions, FailoverOptions):
// without it a black-holed Redis stalls a renewal for the full read timeout, which may be
// longer than the lease. New logs a warning when it can see the option is off.
//
// Build the client with MaxRetries: -1 as well (go-redis retries every failed command up to
// 3 times by default). A retry resends a script whose first run may have happened with only
// its reply lost, and it hides that from this package, which does its own clean-up of calls
// that may have run. The acquire scripts are idempotent (a retried acquire recognises the
// lock its first run took, by the owner token, and answers with that run's fencing token),
// and the last release drops every hold at once, so a retry is no longer harmful to the lock;
// but retries stretch a call towards its deadline and resend the semaphore's acquire, which
// can then give up the permit its first run took and wait for one again. Without retries a
// failed call fails at once and the package undoes it when it may have run (a timeout, EOF,
// connection reset, any network error after the command was sent).
//
// Internals: every lock kind (the core lock, the fair lock, Redlock, the semaphore) is one
// kind value (kind.go) holding its own Redis calls; the rest is shared. Client.enter and
// Client.obtainKind (obtain.go) are the preamble (empty key, ended context, Close,
// re-entry) and the first attempt of every Obtain; Client.waitLoop (wait.go) is the waiting
// half; hold (hold.go) is the life of a held lock: newHold, reenter, Release, lose; the
// watchdog type (watchdog.go) keeps any lease alive and applies the loss rule given only a
// renew function. locking/README.md gives the order in which to read the files.
//
// Options.Replicas adds a WAIT for that many replicas after every acquisition and renewal, on
// the connection that made it (replicas.go): a lock no replica acknowledged is given back and
// tried again, a renewal no replica acknowledged counts as failed.
//
// The non-test code imports only go-redis and the standard library.
package locking

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors of the package. Any other error returned by Obtain, TryObtain, Release or TTL is a
// Redis failure (connection refused, timeout): callers treat it as "unavailable".
var (
	// ErrNotObtained is returned by Obtain and TryObtain when the lock is held by another and
	// the wait ended; joined with ctx.Err() when the caller's context ended it.
	ErrNotObtained = errors.New("locking: not obtained")
	// ErrNotHeld is returned by Release and TTL of a lock that was lost or already released,
	// and by Release of a nil *Lock.
	ErrNotHeld = errors.New("locking: not held")
	// ErrLost is what Lock.Err returns (wrapped with the cause) after the lock was lost.
	ErrLost = errors.New("locking: lock lost")
	// ErrClosed is returned by Obtain and TryObtain after Client.Close.
	ErrClosed = errClosed
	// ErrEmptyKey is returned, before any Redis call, by every call that obtains a lock or a
	// permit (Obtain, TryObtain, ObtainFair, TryObtainFair, Redlock.Obtain and TryObtain,
	// Semaphore.Acquire and TryAcquire) for the key "": its hash tag "{}" would be empty,
	// and Redis Cluster would then place the lock hash and its fencing counter in different
	// slots.
	ErrEmptyKey = errors.New("locking: empty key")
	// ErrNotReplicated is returned, joined with ErrNotObtained, by Obtain, TryObtain,
	// ObtainFair, TryObtainFair, ObtainMany and TryObtainMany when Options.Replicas is set
	// and the wait ended after an attempt took the lock but fewer replicas than asked
	// acknowledged it within ReplicaTimeout (the key was given back each time). The wrapping
	// error tells how many did.
	ErrNotReplicated = errors.New("locking: replicas did not acknowledge the lock")
	// ErrReplicasUnsupported is returned, before any Redis call, by every obtain of a Client
	// whose Options.Replicas is set over a go-redis client that is neither a *redis.Client
	// nor a *redis.ClusterClient (WAIT must reach the node that took the key), and by every
	// Obtain of a Redlock built with Options.Replicas (its nodes are independent masters).
	ErrReplicasUnsupported = errors.New("locking: Options.Replicas needs one Redis deployment with replicas " +
		"(a *redis.Client, Sentinel's failover client or a *redis.ClusterClient), not a Redlock or a Ring")
)

// Client obtains locks from one Redis deployment. It is safe for concurrent use. Its only
// background goroutine is the shared subscription that wakes waiters, started by the first
// Obtain that has to wait and stopped by Close.
type Client struct {
	rdb         redis.UniversalClient
	prefix      string
	lease       time.Duration
	watchdog    bool
	wait        time.Duration
	callTimeout time.Duration
	replicas    int           // Options.Replicas: WAIT for this many after each acquisition and renewal (replicas.go)
	replicaWait time.Duration // Options.ReplicaTimeout, the timeout of each WAIT
	log         *slog.Logger
	hooks       Hooks
	notify      *notifier
	family      familyConfig  // spin mode, fair-lock queue timeout (options.go)
	breakers    *Breakers     // nil: none (breaker.go)
	debts       debts         // clean-ups that did not reach Redis (debts.go)
	live        liveness      // the liveness check of sleeping waiters (liveness.go)
	core, fair  *kind         // the kinds of Obtain and ObtainFair (kind.go, fair.go)
	process     string        // this Client's process id, named by its WithTakeover owners (takeover.go)
	processTTL  time.Duration // Options.ProcessTTL
	hb          heartbeat     // renews the process key (heartbeat.go)
	lastDeath   atomic.Int64  // unix ns: when a takeover check last found a dead process (takeover.go)
}

// New returns a Client over rdb (a *redis.Client, *redis.ClusterClient, *redis.Ring or any
// UniversalClient). A nil opts means the defaults. New never fails: it logs a warning when
// rdb's options are visible and ContextTimeoutEnabled is off.
func New(rdb redis.UniversalClient, opts *Options) *Client {
	c := &Client{
		rdb:         rdb,
		prefix:      opts.keyPrefix(),
		lease:       opts.lease(),
		watchdog:    opts == nil || !opts.DisableWatchdog,
		wait:        opts.wait(),
		callTimeout: opts.callTimeout(),
		log:         opts.logger(),
		family:      opts.family(),
	}
	c.hb.first = make(chan struct{}, 1)
	if opts != nil {
		c.hooks, c.breakers = opts.Hooks, opts.Breakers
	}
	if c.callTimeout > c.lease/3 { // a renewal must end well inside the lease
		c.callTimeout = max(c.lease/4, time.Millisecond)
	}
	c.replicas, c.replicaWait = opts.replicas(), opts.replicaTimeout(c.callTimeout, c.lease)
	c.process, c.processTTL = newOwner()[:16], opts.processTTL(c.callTimeout)
	c.notify = newNotifier(rdb, c.log, c.callTimeout)
	c.core, c.fair = c.coreKind(), c.fairKind()
	if c.replicas > 0 && !replicable(rdb) {
		c.core.refuse, c.fair.refuse = ErrReplicasUnsupported, ErrReplicasUnsupported
	}
	c.breakers.watchClient(c) // undone by Close
	if enabled, known := contextTimeoutEnabled(rdb); known && !enabled {
		c.log.Warn("locking: the go-redis client has ContextTimeoutEnabled off; " +
			"call timeouts are not enforced and a stalled Redis can outlast the lease")
	}
	return c
}

func contextTimeoutEnabled(rdb redis.UniversalClient) (enabled, known bool) {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled, true
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled, true
	case *redis.Ring:
		return r.Options().ContextTimeoutEnabled, true
	}
	return false, false
}

// Close stops the shared subscription goroutine and waits for it, and leaves the breakers of
// Options.Breakers (the Client no longer pays its debts when one closes). It does not release
// held locks: each Lock owns its watchdog until Release. Obtain after Close returns ErrClosed.
// Close always returns nil.
func (c *Client) Close() error {
	c.breakers.unwatchClient(c)
	c.notify.close()
	c.stopHeartbeat()
	return nil
}

// newOwner returns a random 128-bit owner token as 32 hex characters.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
