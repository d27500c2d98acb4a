package locking

import (
	"log/slog"
	"time"
)

// Defaults of Options.
const (
	DefaultKeyPrefix = "lock:"
	DefaultLease     = 30 * time.Second
	DefaultWait      = 10 * time.Second

	maxCallTimeout = 2 * time.Second
	minCallTimeout = 50 * time.Millisecond
)

// Options configure a Client. A nil *Options, and every zero field, means the default.
type Options struct {
	// KeyPrefix is prepended to every Redis name of the package. For key K the lock hash is
	// KeyPrefix+"{K}", the fencing counter KeyPrefix+"{K}:fence" and the release channel
	// KeyPrefix+"{K}:released" (one hash tag, so all live in one Cluster slot); KeysOf
	// builds them and lists the names of every kind. Default "lock:".
	KeyPrefix string

	// Lease is how long a lock lives in Redis without renewal. With the watchdog on (the
	// default) it is renewed every Lease/3 while held. Default 30s.
	Lease time.Duration

	// DisableWatchdog turns renewal off: the lock then holds for exactly one Lease (as
	// Redisson's explicit leaseTime) and its Done channel closes with ErrLost when the lease
	// is about to run out. Default false.
	DisableWatchdog bool

	// Wait is the longest time Obtain waits for a held lock; the caller's context may end the
	// wait sooner. Zero means the default, 10s; a negative value means no limit but the
	// context. WithWait overrides it per call.
	Wait time.Duration

	// CallTimeout bounds one Redis call (acquire, renew, release, TTL). Default
	// min(Lease/10, 2s), at least 50ms; a value above Lease/3 is lowered to Lease/4 so that a
	// renewal ends well inside the lease. It is only honoured if the go-redis client was built
	// with ContextTimeoutEnabled: New logs a warning when it can see that it is not.
	CallTimeout time.Duration

	// Logger receives warnings (lost locks, failed renewals). Default: discard.
	Logger *slog.Logger

	// Hooks are called on lock events (metrics, debugging). Default: none.
	Hooks Hooks

	// Spin, when set, makes Obtain (and the fair lock and semaphore) wait by polling with
	// exponential backoff and jitter instead of subscribing to release messages: no
	// subscription at all, for deployments with very many locks, at the cost of up to
	// SpinOptions.MaxBackoff of extra latency per handoff. Default nil: pub/sub. Redlock
	// always waits this way (with the SpinOptions defaults when nil).
	Spin *SpinOptions

	// Breakers, if set, are the circuit breakers of the process's Redis nodes (installed on
	// the go-redis clients with Breakers.Watch or WatchCluster): a waiter is woken when one of
	// them opens, and sleeps at most one probe interval while one is open, so that it tries
	// again and fails at once instead of sleeping on a release message a hung node will never
	// send. Default nil: none.
	Breakers *Breakers

	// Replicas, when positive, is how many replicas of the lock's Redis node must acknowledge
	// an acquisition before the lock is held: after the acquire script, Obtain, ObtainFair and
	// ObtainMany (each key) send WAIT Replicas ReplicaTimeout on the connection that took the
	// key. Fewer acknowledgements in time give the key back (compare-and-delete) and the call
	// tries again within its wait; a wait that ends so returns ErrNotReplicated (joined with
	// ErrNotObtained). Every watchdog renewal WAITs too, and one that fewer replicas
	// acknowledged counts as a failed renewal: the loss deadline then runs from the last
	// acknowledged one, so the holder stops before the lease an acknowledging replica knows
	// can end. It needs a *redis.Client (a Sentinel failover client is one) or a
	// *redis.ClusterClient (WAIT goes to the key's master); any other client, and a Redlock
	// (independent masters, no replicas to wait for), refuse it with ErrReplicasUnsupported.
	// The semaphore ignores it. WAIT does not make Redis strongly consistent: see
	// locking/README.md. Default 0: no WAIT.
	Replicas int

	// ReplicaTimeout bounds each WAIT of Replicas. Default CallTimeout; lowered so that
	// CallTimeout + ReplicaTimeout stays within Lease/3 (a renewal, WAIT included, ends well
	// inside the lease), and never below 1ms (WAIT 0 would block for ever).
	ReplicaTimeout time.Duration

	// QueueTimeout is how long a fair-lock waiter (Client.ObtainFair) keeps its place in the
	// queue without refreshing it: a waiter that vanishes (crash, partition) is dropped this
	// long after its last attempt, and a live waiter refreshes its place every
	// QueueTimeout/3. Default 5s, or Lease if that is shorter (a vanished waiter at the head
	// of the queue holds up those behind it no longer than a vanished holder would); never
	// less than 3*CallTimeout.
	QueueTimeout time.Duration

	// ProcessTTL is the life of the Client's process key without renewal (heartbeat.go): the
	// key says that the process is alive, and a WithTakeover waiter takes the lock of a
	// WithTakeover holder whose process key is gone, about ProcessTTL after the process died
	// instead of the lease. The key is set by the first WithTakeover Obtain and renewed every
	// ProcessTTL/3 (one call per Client, not per lock) until Close. Default max(1s,
	// 3*CallTimeout), never less than 3*CallTimeout; a Redis that cannot be reached for about
	// ProcessTTL lets takeover waiters take this Client's takeover locks.
	ProcessTTL time.Duration
}

// Hooks are optional callbacks on lock events. They are called synchronously from the
// goroutine that caused the event (Obtain, Release or the watchdog) and must be quick; Lost
// runs on the lock's watchdog goroutine, so it must not call Release (which waits for it).
// Re-entrant obtains and releases (see Client.Obtain) do not fire Acquired or Released:
// each key fires Acquired once per first acquisition and Released or Lost once after it.
type Hooks struct {
	// Acquired is called when a lock is first acquired, with its fencing token and the time
	// spent waiting for it.
	Acquired func(key string, token int64, waited time.Duration)
	// Renewed is called after each successful watchdog renewal.
	Renewed func(key string)
	// Lost is called once when a held lock is lost (err wraps ErrLost).
	Lost func(key string, err error)
	// Released is called when the last hold of a lock is released, with the time it was held
	// (also when the release call to Redis failed: the process no longer holds the lock).
	// A lock found lost by its release fires Lost instead.
	Released func(key string, held time.Duration)
}

// JoinHooks returns Hooks that call each non-nil hook of hs, in the order given (for
// example metrics first, then a debug registry of held locks).
func JoinHooks(hs ...Hooks) Hooks {
	var j Hooks
	for _, h := range hs {
		j.Acquired = joinAcquired(j.Acquired, h.Acquired)
		j.Renewed = join1(j.Renewed, h.Renewed)
		j.Lost = join2(j.Lost, h.Lost)
		j.Released = join2(j.Released, h.Released)
	}
	return j
}

func joinAcquired(a, b func(string, int64, time.Duration)) func(string, int64, time.Duration) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(k string, t int64, d time.Duration) { a(k, t, d); b(k, t, d) }
}

func join1(a, b func(string)) func(string) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(k string) { a(k); b(k) }
}

func join2[T any](a, b func(string, T)) func(string, T) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(k string, v T) { a(k, v); b(k, v) }
}

func (o *Options) keyPrefix() string {
	if o == nil || o.KeyPrefix == "" {
		return DefaultKeyPrefix
	}
	return o.KeyPrefix
}

func (o *Options) lease() time.Duration {
	if o == nil || o.Lease <= 0 {
		return DefaultLease
	}
	return o.Lease
}

func (o *Options) wait() time.Duration {
	if o == nil || o.Wait == 0 {
		return DefaultWait
	}
	return o.Wait
}

func (o *Options) callTimeout() time.Duration {
	if o != nil && o.CallTimeout > 0 {
		return o.CallTimeout
	}
	d := min(o.lease()/10, maxCallTimeout)
	return max(d, minCallTimeout)
}

func (o *Options) replicas() int {
	if o == nil || o.Replicas < 0 {
		return 0
	}
	return o.Replicas
}

// replicaTimeout is the timeout of each WAIT: ReplicaTimeout or CallTimeout, within
// Lease/3 − CallTimeout, at least 1ms.
func (o *Options) replicaTimeout(callTimeout, lease time.Duration) time.Duration {
	d := callTimeout
	if o != nil && o.ReplicaTimeout > 0 {
		d = o.ReplicaTimeout
	}
	return max(min(d, lease/3-callTimeout), time.Millisecond)
}

func (o *Options) logger() *slog.Logger {
	if o == nil || o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// drift is the clock-drift allowance subtracted from a lease: 1% of it plus 2ms (Redlock's).
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// familyConfig holds the Options of the lock family: spin mode and the fair-lock queue.
type familyConfig struct {
	spin         *SpinOptions // nil: pub/sub waiting; defaults filled in
	queueTimeout time.Duration
}

func (o *Options) family() familyConfig {
	var f familyConfig
	if o == nil {
		return f
	}
	if o.Spin != nil {
		s := o.Spin.withDefaults()
		f.spin = &s
	}
	f.queueTimeout = o.QueueTimeout
	return f
}

// ObtainOption changes one Obtain or TryObtain call.
type ObtainOption func(*obtainConfig)

type obtainConfig struct {
	floor    int64
	wait     time.Duration
	takeover bool // WithTakeover (takeover.go)
}

// obtainConfigFor applies opts to the Client's defaults; wait false makes one attempt.
func (c *Client) obtainConfigFor(wait bool, opts []ObtainOption) obtainConfig {
	cfg := obtainConfig{wait: c.wait}
	for _, o := range opts {
		o(&cfg)
	}
	if !wait {
		cfg.wait = 0
	}
	return cfg
}

// WithFloor sets the fencing-token floor: the token issued is max(counter, floor)+1, so
// tokens stay above a value the caller stored even if Redis lost its counter. Re-entry
// ignores it (the lock keeps its token).
func WithFloor(token int64) ObtainOption {
	return func(c *obtainConfig) { c.floor = max(c.floor, token) }
}

// WithWait sets the longest wait of one Obtain call, overriding Options.Wait: zero makes
// Obtain a single attempt (as TryObtain), a negative value means no limit but the context.
func WithWait(d time.Duration) ObtainOption {
	return func(c *obtainConfig) { c.wait = d }
}
