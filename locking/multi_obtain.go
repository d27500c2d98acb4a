package locking

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"
)

// ErrNoKeys is returned by ObtainMany and TryObtainMany, before any Redis call, for an empty
// list of keys.
var ErrNoKeys = errors.New("locking: no keys")

// errInMulti answers Obtain (and ObtainFair, ObtainMany) of a key under a context that holds
// it through a Multi: the call would otherwise wait for its own key until its wait ends.
var errInMulti = errors.New("locking: the context holds this key through a Multi, whose keys are not re-entered")

// errInLock answers ObtainMany under a context that holds one of its keys through a Lock: a
// Multi does not re-enter, and would wait for its own key.
var errInLock = errors.New("locking: the context holds one of the keys through a Lock; a Multi does not re-enter it")

// ObtainMany returns a hold over every key of keys, each with its floor, or none: it takes
// the keys one by one in one canonical order (sorted by name, duplicates merged with the
// greatest of their floors), waiting for each key as Obtain does, and on any failure it
// gives back the keys it took, so nothing is left held.
//
// Canonical order is what makes waiting safe: a caller waits for a key only while holding
// keys that sort before it. A cycle of waiters (each holding a key the next one waits for)
// would need the keys to increase all the way round the cycle, back to where it started,
// which is impossible: Multis never deadlock among themselves, and {a,b} against {b,a} is
// safe. Every Client sorts the same names the same way (byte order of the key). The price is that keys taken early stay held,
// renewed, while the later ones are awaited: the whole call is bounded by one wait limit
// (Options.Wait, WithWait; ctx may end it sooner), not one per key. Canonical order covers
// the keys of one call only: a caller that already holds a lock and then obtains more
// outside that order can still wait in a cycle, until a wait ends.
//
// Every key's lock lives in its own hash slot, so on Redis Cluster the keys may sit on
// different nodes: each key is taken by the single-key acquire script on its own node, one
// after another; renewals and the release are pipelined (one round trip per node). One
// watchdog, started with the first key, renews every key taken (every Lease/3, one pipelined
// call), and applies the single lock's loss rule to the hold as a whole, counted from the
// last renewal that extended every key. With DisableWatchdog the hold ends (Done, ErrLost)
// just before the first key's lease runs out: one lease after the first key was taken, not
// after the last.
//
// WithWait sets the wait of the whole call; WithFloor, when given, is a floor for every key
// (raised to a key's own Floor). A Multi is not re-entered: under a context from
// Multi.Context, Obtain of one of its keys fails at once (ErrNotObtained), and ObtainMany
// under a context that holds one of the keys (a Lock's or a Multi's) fails at once too.
//
// It returns ErrNotObtained when the wait ended (joined with ctx.Err() when ctx ended it,
// and with a *KeyLostError when a key taken early was lost during the wait), ErrNoKeys for
// an empty list, ErrEmptyKey for the key "", ErrClosed after Client.Close, and any other
// error when Redis failed.
func (c *Client) ObtainMany(ctx context.Context, keys []KeyFloor, opts ...ObtainOption) (*Multi, error) {
	return c.obtainMany(ctx, keys, true, opts)
}

// TryObtainMany is ObtainMany without waiting: one attempt per key, in order, and the keys
// taken are given back as soon as one is held by another (ErrNotObtained).
func (c *Client) TryObtainMany(ctx context.Context, keys []KeyFloor, opts ...ObtainOption) (*Multi, error) {
	return c.obtainMany(ctx, keys, false, opts)
}

func (c *Client) obtainMany(ctx context.Context, kfs []KeyFloor, wait bool, opts []ObtainOption) (*Multi, error) {
	cfg := c.obtainConfigFor(wait, opts)
	if cfg.takeover {
		if err := c.startHeartbeat(ctx); err != nil {
			return nil, err
		}
	}
	names, floors, err := canonicalKeys(kfs, cfg.floor)
	switch {
	case err != nil:
		return nil, err
	case c.core.refuse != nil: // Options.Replicas over a client WAIT cannot follow
		return nil, c.core.refuse
	case ctx.Err() != nil:
		return nil, errors.Join(ErrNotObtained, ctx.Err())
	case c.notify.isClosed():
		return nil, ErrClosed
	}
	for _, name := range names {
		if err := heldByContext(ctx, c, name); err != nil {
			return nil, err
		}
	}
	m := &Multi{c: c, owner: c.ownerFor(cfg.takeover), keys: make([]keys, len(names)), tokens: make([]int64, len(names)),
		start: time.Now(), done: make(chan struct{})}
	for i, name := range names {
		m.keys[i] = c.keysFor(name)
	}
	wctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	m.abort = abort
	deadline := m.start.Add(cfg.wait)
	for i, k := range m.keys {
		limit := cfg.wait // 0: one attempt; negative: no limit but ctx
		if limit > 0 {
			limit = max(time.Until(deadline), 0) // past the deadline: one last attempt
		}
		token, sent, err := c.obtainKey(wctx, k, m.owner, floors[i], limit, c.newTakeover(cfg.takeover && limit != 0, true))
		if err != nil {
			if lost := m.giveUp(ctx); lost != nil && errors.Is(err, ErrNotObtained) {
				return nil, errors.Join(ErrNotObtained, lost) // the loss ended the wait
			}
			return nil, err
		}
		m.mu.Lock()
		m.tokens[i], m.held = token, i+1
		m.mu.Unlock()
		if i == 0 { // the watchdog keeps the keys taken alive while the others are awaited
			m.wd = c.multiWatchdog(m)
			m.wd.start(sent)
		}
	}
	m.mu.Lock()
	lost := m.lost
	m.abort = nil // from now on a loss ends the hold, not the obtain
	m.mu.Unlock()
	if lost != nil { // lost after the last key was taken, before the hold began
		m.giveUp(ctx)
		return nil, errors.Join(ErrNotObtained, lost)
	}
	m.got = time.Now()
	if f := c.hooks.Acquired; f != nil {
		for i, k := range m.keys {
			f(k.name, m.tokens[i], m.got.Sub(m.start))
		}
	}
	return m, nil
}

// canonicalKeys returns the names of kfs sorted and de-duplicated, each with its floor (the
// greatest of its duplicates', and at least floor, at least 0). It refuses an empty list
// (ErrNoKeys) and the key "" (ErrEmptyKey).
func canonicalKeys(kfs []KeyFloor, floor int64) ([]string, []int64, error) {
	if len(kfs) == 0 {
		return nil, nil, ErrNoKeys
	}
	byName := make(map[string]int64, len(kfs))
	for _, kf := range kfs {
		if kf.Key == "" {
			return nil, nil, ErrEmptyKey
		}
		byName[kf.Key] = max(byName[kf.Key], kf.Floor, floor) // a missing name reads 0
	}
	names := slices.Sorted(maps.Keys(byName))
	floors := make([]int64, len(names))
	for i, name := range names {
		floors[i] = byName[name]
	}
	return names, floors, nil
}

// heldByContext refuses ObtainMany of key under a context that holds key in this Client,
// through a Multi (multiIn) or a Lock still held: a Multi does not re-enter, and would wait
// for its own key.
func heldByContext(ctx context.Context, c *Client, key string) error {
	if err := multiIn(ctx, c, key); err != nil {
		return err
	}
	if h := heldIn(ctx, c, key); h != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.handles > 0 && h.lost == nil {
			return errors.Join(ErrNotObtained, errInLock)
		}
	}
	return nil
}

// multiIn is the answer of an Obtain of key under a context that carries a Multi of c
// holding key (Multi.Context): ErrNotObtained joined with errInMulti while the Multi holds,
// or with ErrLost once it was lost; nil when there is none, or it was released (a detached
// context: the key is obtained anew).
func multiIn(ctx context.Context, c *Client, key string) error {
	m, _ := ctx.Value(ctxKey{c, key}).(*Multi)
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.released:
		return nil
	case m.lost != nil:
		return errors.Join(ErrNotObtained, ErrLost)
	}
	return errors.Join(ErrNotObtained, errInMulti)
}

// obtainKey takes one key of a Multi for owner, waiting at most limit (0: one attempt;
// negative: no limit but ctx) as Obtain does: one attempt (unless this Client's waiters of
// the key are queued, whom it does not overtake), then waitLoop. It returns the fencing token
// and when the acquire that took the key was sent.
func (c *Client) obtainKey(ctx context.Context, k keys, owner string, floor int64, limit time.Duration, tk *takeover) (int64, time.Time, error) {
	var (
		token int64
		sent  time.Time
	)
	var short shortfall // Options.Replicas: an attempt whose key no replica acknowledged
	try := func(ctx context.Context) (bool, time.Duration, error) {
		dead, _ := tk.dead(ctx, k, false)
		t, s, hint, err := c.acquireKey(ctx, k, owner, floor, limit != 0, dead)
		token, sent = t, s
		if short.note(err) {
			err = nil
		}
		if t == 0 && err == nil {
			hint = tk.failed(hint)
		}
		return t > 0, hint, err
	}
	var hint time.Duration // the first attempt's (spinWait's first sleep is bounded by it)
	if limit == 0 || !c.notify.queued(k.channel) {
		var ok bool
		var err error
		ok, hint, err = try(ctx)
		switch {
		case err != nil:
			return 0, sent, err
		case ok:
			return token, sent, nil
		case limit == 0:
			return 0, sent, short.result(ErrNotObtained)
		}
	}
	if err := c.waitLoop(ctx, k.channel, limit, hint, try); err != nil {
		return 0, sent, short.result(err)
	}
	return token, sent, nil
}

// giveUp ends an ObtainMany that failed: it stops the watchdog and gives back every key
// taken (forget.lua, which also wakes their waiters). It returns the loss, if the watchdog
// declared one.
func (m *Multi) giveUp(ctx context.Context) *KeyLostError {
	if m.wd != nil {
		m.wd.stop()
	}
	m.mu.Lock()
	held, lost := m.keys[:m.held], m.lost
	m.mu.Unlock()
	m.forget(ctx, held)
	return lost
}
