package locking

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyFloor is one key of ObtainMany with its fencing-token floor: the token issued for Key is
// max(counter, Floor)+1, as with WithFloor for one key, so that it stays above a token the
// caller stored (an item's fence_token) even if Redis lost its counter.
type KeyFloor struct {
	Key   string // the key, without the prefix (as for Obtain); never ""
	Floor int64  // the token issued is above it; 0 for none
}

// KeyLostError is the error of a Multi that lost one of its keys: what Multi.Err returns,
// and the cause of the contexts from Multi.Context. It wraps ErrLost (errors.Is(err,
// ErrLost)), and names the key.
type KeyLostError struct {
	// Key is the key found lost: gone or taken by another at a renewal, the first key whose
	// renewal failed when Redis stayed unreachable, or the first key (whose lease ends first)
	// when the fixed lease of DisableWatchdog ran out.
	Key string
	// Err is the watchdog's verdict; it wraps ErrLost.
	Err error
}

// Error names the key and the cause.
func (e *KeyLostError) Error() string {
	return fmt.Sprintf("%v (key %q of a multi-key lock)", e.Err, e.Key)
}

// Unwrap returns Err (which wraps ErrLost).
func (e *KeyLostError) Unwrap() error { return e.Err }

// Multi is a hold over several keys at once, all or none: the value ObtainMany returns.
// Each key is held as a core lock (the same Redis hash as Obtain's, with this Multi's one
// owner token), so a Multi excludes Obtain, ObtainFair and other Multis on any of its keys;
// each key has its own fencing token. One watchdog renews every key; the loss of any key ends
// the whole hold. Its methods are safe for concurrent use; all methods of a nil *Multi return
// ErrNotHeld or zero values.
type Multi struct {
	c      *Client
	owner  string
	keys   []keys  // sorted by name, no duplicates: the order of acquisition
	tokens []int64 // tokens[i] is the fencing token of keys[i]; written before ObtainMany returns
	wd     *watchdog
	start  time.Time // when ObtainMany was called
	got    time.Time // when the last key was taken

	mu       sync.Mutex
	held     int                     // keys[:held] are taken: the watchdog renews those
	abort    context.CancelCauseFunc // while obtaining: ends the wait when a held key is lost
	suspect  string                  // the key whose last renewal failed or found it gone
	lost     *KeyLostError           // set once, when the watchdog declared the loss
	done     chan struct{}
	err      error // nil while held; *KeyLostError or ErrNotHeld after
	cause    error
	released bool
	contexts contexts // the live contexts from Context
}

// forget deletes each of ks if still held by m (fair_release.lua's clean-up, pipelined), best effort,
// bounded by CallTimeout only.
func (m *Multi) forget(ctx context.Context, ks []keys) {
	if len(ks) == 0 {
		return
	}
	cctx, cancel := m.c.bestEffort(ctx)
	defer cancel()
	cmds := evalEach(cctx, m.c.rdb, fairReleaseScript, ks, func(k keys) ([]string, []any) {
		return m.c.fairArgs(k, m.owner, true, true, true)
	})
	for i, k := range ks { // a key whose clean-up did not reach Redis is owed (debts.go)
		m.c.debts.owe(k, m.owner, cmds[i].Err(), m.c.forgetPay(k, m.owner))
	}
}

// multiWatchdog returns the one watchdog of m: it renews every key taken so far, or none for
// a fixed lease.
func (c *Client) multiWatchdog(m *Multi) *watchdog {
	w := &watchdog{lease: c.lease, callTimeout: c.ackTimeout(), onLost: m.lose}
	if c.watchdog {
		w.renew = m.renew
		w.onRenewed = func() {
			if f := c.hooks.Renewed; f != nil {
				for _, k := range m.heldKeys() {
					f(k.name)
				}
			}
		}
	}
	return w
}

func (m *Multi) heldKeys() []keys {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys[:m.held]
}

// renew is the watchdog's renewal of every key taken (renew.lua per key, one pipeline). It
// reports the hold kept only when every key was extended; a key found gone or taken is a
// loss at once, a failed call an error (the watchdog retries until its loss deadline). The
// key at fault is remembered for the loss.
func (m *Multi) renew(ctx context.Context) (bool, error) {
	held := m.heldKeys()
	args := func(k keys) ([]string, []any) {
		return []string{k.hash}, []any{m.owner, m.c.lease.Milliseconds()}
	}
	var (
		cmds []*redis.Cmd
		acks []error // Options.Replicas: the WAIT of each key's node
	)
	if m.c.replicas > 0 {
		cmds, acks = m.c.evalEachAcked(ctx, renewScript, held, args)
	} else {
		cmds = evalEach(ctx, m.c.rdb, renewScript, held, args)
	}
	var (
		errs    []error
		suspect string
	)
	for i, cmd := range cmds {
		n, err := cmd.Int64()
		if err == nil && n == 1 && acks != nil && acks[i] != nil {
			err = acks[i] // extended, but not acknowledged: a failed renewal
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("renew %q: %w", held[i].name, err))
			if suspect == "" {
				suspect = held[i].name
			}
		case n != 1:
			m.setSuspect(held[i].name)
			return false, nil
		}
	}
	if len(errs) > 0 {
		m.setSuspect(suspect)
		return false, errors.Join(errs...)
	}
	return true, nil
}

func (m *Multi) setSuspect(key string) {
	m.mu.Lock()
	m.suspect = key
	m.mu.Unlock()
}

// lose is the watchdog's onLost. While ObtainMany still waits for later keys, it ends that
// wait (the obtain fails and gives every key back); afterwards the Lost hook runs for every
// key and the hold ends: Done closed, contexts cancelled with the *KeyLostError.
func (m *Multi) lose(err error) {
	m.mu.Lock()
	if m.lost != nil {
		m.mu.Unlock()
		return
	}
	key := m.suspect
	if key == "" { // a fixed lease ran out: the first key's, taken first
		key = m.keys[0].name
	}
	lost := &KeyLostError{Key: key, Err: err}
	m.lost = lost
	abort := m.abort
	m.mu.Unlock()
	if abort != nil {
		m.c.log.Warn("locking: multi-key lock lost while obtaining", "key", key, "keys", m.Keys(), "err", err)
		abort(lost)
		return
	}
	m.c.log.Warn("locking: multi-key lock lost", "key", key, "keys", m.Keys(), "err", err)
	if f := m.c.hooks.Lost; f != nil {
		for _, k := range m.keys {
			f(k.name, lost)
		}
	}
	m.mu.Lock()
	m.finishLocked(lost, lost)
	m.mu.Unlock()
}

// finishLocked closes Done and cancels the contexts, once; m.mu is held.
func (m *Multi) finishLocked(err, cause error) {
	if m.err != nil {
		return
	}
	m.err, m.cause = err, cause
	m.contexts.cancelAll(cause) // before Done, so a closed Done implies cancelled contexts
	close(m.done)
}

// Release gives every key up: Done is closed and the contexts from Context are cancelled,
// the watchdog is stopped (and waited for), then each key still ours is deleted and its
// waiters woken, in one pipelined call. After a loss it deletes the keys still ours (so
// their waiters need not wait for their leases) and returns ErrNotHeld.
//
// It returns ErrNotHeld if the Multi was already released or lost, or if a key was found no
// longer ours (the others are released all the same, and the Lost hook tells which); a
// Redis failure is returned joined, per key (those keys expire at the end of their lease).
// As Lock.Release, the Redis call always gets CallTimeout from the moment it is made,
// whatever ctx's deadline or cancellation: the Multi's own context, or a request context
// that already ended, may be passed. Only ctx's values are used.
func (m *Multi) Release(ctx context.Context) error {
	if m == nil {
		return ErrNotHeld
	}
	m.mu.Lock()
	if m.released {
		m.mu.Unlock()
		return ErrNotHeld
	}
	m.released = true
	m.finishLocked(ErrNotHeld, ErrNotHeld)
	m.mu.Unlock()

	m.wd.stop()
	m.mu.Lock()
	lost := m.lost // the watchdog may have declared the loss meanwhile
	m.mu.Unlock()
	if lost != nil {
		m.forget(ctx, m.keys)
		return ErrNotHeld
	}
	cctx, cancel := m.c.bestEffort(ctx)
	defer cancel()
	cmds := evalEach(cctx, m.c.rdb, fairReleaseScript, m.keys, func(k keys) ([]string, []any) {
		return m.c.fairArgs(k, m.owner, true, false, false) // and wake a fair waiter of each key
	})
	var (
		errs []error
		gone bool
	)
	held := time.Since(m.got)
	for i, cmd := range cmds {
		k := m.keys[i]
		left, err := cmd.Int64()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("locking: release %q: %w", k.name, err))
			m.c.debts.owe(k, m.owner, err, m.c.forgetPay(k, m.owner)) // the key may stay ours
		case left < 0: // found lost only now: the holder still hears of it once, as a loss
			gone = true
			lost := &KeyLostError{Key: k.name, Err: fmt.Errorf("%w: %w", ErrLost, errTaken)}
			m.c.log.Warn("locking: multi-key lock lost", "key", k.name, "keys", m.Keys(), "err", lost.Err)
			if f := m.c.hooks.Lost; f != nil {
				f(k.name, lost)
			}
			continue
		}
		// Also after a Redis failure: this process no longer holds the key.
		if f := m.c.hooks.Released; f != nil {
			f(k.name, held)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if gone {
		return ErrNotHeld
	}
	return nil
}

// evalEach runs script once per key of ks, with the KEYS and ARGV that args gives for the
// key, in one pipeline: one round trip (on a Cluster, one per node, in parallel) instead of
// one per key. Calls that met a server not knowing the script yet (NOSCRIPT: a fresh or
// restarted Redis) run again through Script.Run, which loads it. Each returned command
// carries its own reply or error.
func evalEach(ctx context.Context, rdb scriptPipeliner, script *redis.Script, ks []keys,
	args func(keys) ([]string, []any)) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(ks))
	if len(ks) == 1 {
		kk, a := args(ks[0])
		cmds[0] = script.Run(ctx, rdb, kk, a...)
		return cmds
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range ks {
			kk, a := args(k)
			cmds[i] = script.EvalSha(ctx, p, kk, a...)
		}
		return nil
	})
	for i, k := range ks {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			kk, a := args(k)
			cmds[i] = script.Run(ctx, rdb, kk, a...)
		}
	}
	return cmds
}

// scriptPipeliner is what evalEach runs on: a go-redis client, or one connection (Conn).
type scriptPipeliner interface {
	redis.Scripter
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// Keys returns the keys held, without the prefix, sorted and de-duplicated: the order in
// which they were taken. Nil for a nil Multi.
func (m *Multi) Keys() []string {
	if m == nil {
		return nil
	}
	names := make([]string, len(m.keys))
	for i, k := range m.keys {
		names[i] = k.name
	}
	return names
}

// Token returns the fencing token of key: strictly greater than every token issued earlier
// for key, by any client, and than key's floor. Zero for a key not in the Multi and for nil.
func (m *Multi) Token(key string) int64 {
	if m == nil {
		return 0
	}
	i, ok := slices.BinarySearchFunc(m.keys, key, func(k keys, name string) int { return strings.Compare(k.name, name) })
	if !ok {
		return 0
	}
	return m.tokens[i]
}

// Tokens returns the fencing token of every key (a new map). Nil for a nil Multi.
func (m *Multi) Tokens() map[string]int64 {
	if m == nil {
		return nil
	}
	t := make(map[string]int64, len(m.keys))
	for i, k := range m.keys {
		t[k.name] = m.tokens[i]
	}
	return t
}

// Done returns a channel closed when any key is lost or the Multi is released. A nil Multi
// returns a closed channel.
func (m *Multi) Done() <-chan struct{} {
	if m == nil {
		return closedChan
	}
	return m.done
}

// Err returns nil while every key is held, a *KeyLostError (errors.Is(err, ErrLost), naming
// the key) once a key was lost, and ErrNotHeld once released (and for nil).
func (m *Multi) Err() error {
	if m == nil {
		return ErrNotHeld
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Context returns a context derived from parent that is cancelled when a key is lost (cause:
// the *KeyLostError, wrapping ErrLost) or the Multi is released (cause ErrNotHeld). Run the
// guarded work under it. It carries the Multi's keys, only so that Obtain of one of them
// under it fails at once (ErrNotObtained) instead of waiting for its own key: a Multi is not
// re-entered. If the Multi is already lost or released, the context is returned cancelled.
// For a nil Multi it returns a cancelled child of parent.
func (m *Multi) Context(parent context.Context) context.Context {
	if m == nil {
		ctx, cancel := context.WithCancelCause(parent)
		cancel(ErrNotHeld)
		return ctx
	}
	for _, k := range m.keys {
		parent = context.WithValue(parent, ctxKey{m.c, k.name}, m)
	}
	ctx, cancel := context.WithCancelCause(parent)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		cancel(m.cause)
	} else {
		m.contexts.add(&m.mu, ctx, cancel)
	}
	return ctx
}
