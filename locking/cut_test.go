package locking

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// openedAt records when a breaker first opened.
type openedAt struct {
	once sync.Once
	at   atomic.Pointer[time.Time]
	ch   chan struct{}
}

func newOpenedAt() *openedAt { return &openedAt{ch: make(chan struct{})} }

func (o *openedAt) record(_ string, st BreakerState) {
	if st == BreakerOpen {
		o.once.Do(func() {
			now := time.Now()
			o.at.Store(&now)
			close(o.ch)
		})
	}
}

// Attempts in flight on a node that hangs are cut when its breaker opens: they fail at once
// with an error wrapping ErrBreakerOpen (not at their own deadline), their clean-up costs at
// most one more call timeout (it goes through the open breaker, and cannot reach the hung
// node), and it is owed: the probe that closes the breaker pays it, and the key is free.
// The slow attempts use a call timeout of 2s; the breaker is opened by another client's
// 100ms calls on the same node, so the bound is measured from that opening.
func TestBreakerCutsCallsInFlight(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	opened := newOpenedAt()
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, OnState: opened.record})
	defer brk.Close()
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	b := brk.Watch("node", rdb)
	const slowTimeout = 2 * time.Second
	slow := New(rdb, &Options{Lease: 20 * time.Second, CallTimeout: slowTimeout, Breakers: brk})
	defer slow.Close()
	fast := New(rdb, &Options{Lease: 20 * time.Second, CallTimeout: 100 * time.Millisecond, Breakers: brk})
	defer fast.Close()
	other := New(srv.Client(t), &Options{Lease: 20 * time.Second}) // another process, no breaker
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)

	const n = 4
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uniqueKey(t)
	}
	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	type result struct {
		err  error
		sent time.Time
		back time.Time
	}
	results := make([]result, n)
	var started sync.WaitGroup
	var done sync.WaitGroup
	for i := range keys {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			results[i].sent = time.Now()
			started.Done()
			_, results[i].err = slow.TryObtain(ctx, keys[i])
			results[i].back = time.Now()
		}()
	}
	started.Wait()
	for i := 0; i < 5 && b.State() == BreakerClosed; i++ { // open it with short calls
		_, _ = fast.TryObtain(ctx, uniqueKey(t))
	}
	select {
	case <-opened.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the breaker did not open")
	}
	done.Wait()
	at := *opened.at.Load()
	for i, r := range results {
		require.True(t, r.sent.Before(at), "attempt %d was sent before the opening", i)
		assert.ErrorIs(t, r.err, ErrBreakerOpen, "attempt %d: cut by the opening, not timed out", i)
		assert.True(t, maybeExecuted(r.err), "attempt %d: a cut call may have run", i)
		// One more call timeout at most: its clean-up (the hung node never answers it).
		assert.LessOrEqual(t, r.back.Sub(at), slowTimeout*3/2, "attempt %d answered %s after the opening", i, r.back.Sub(at))
		assert.Equal(t, 1, slow.debts.owed(slow.keysFor(keys[i])), "attempt %d: its clean-up is owed", i)
	}

	srv.Resume()
	paused = false
	require.Eventually(t, func() bool { return b.State() == BreakerClosed }, 5*time.Second, 5*time.Millisecond, "a probe closes it")
	// The cut attempts ran in Redis when it answered again (their commands were in its
	// socket) or never did: either way their debts, paid by the probe that closed the
	// breaker, leave each key free.
	for i, key := range keys {
		var l *Lock
		var err error
		require.Eventually(t, func() bool {
			l, err = other.TryObtain(ctx, key)
			return err == nil
		}, 5*time.Second, 10*time.Millisecond, "key %d is held by an attempt given up during the hang: %v", i, err)
		require.NoError(t, l.Release(ctx))
		assert.Zero(t, slow.debts.owed(slow.keysFor(key)))
	}
}

// A process whose only lock call waits asleep on a release message still finds out that the
// node hangs: the waiter checks the node's liveness (a PING, counted by the breaker) every
// two call timeouts without a message, so that the breaker opens and wakes it, instead of
// it sleeping until its wait limit (10s here) or the holder's lease (20s). The bound is
// measured from the hang: one liveness interval plus the breaker's failures, each a call
// timeout, doubled for a loaded machine.
func TestBreakerLivenessWhileWaiting(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	opened := newOpenedAt()
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond, OnState: opened.record})
	defer brk.Close()
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	b := brk.Watch("node", rdb)
	const callTimeout = 100 * time.Millisecond
	c := New(rdb, &Options{Lease: 20 * time.Second, CallTimeout: callTimeout, Wait: 10 * time.Second, Breakers: brk})
	defer c.Close()
	other := New(srv.Client(t), &Options{Lease: 20 * time.Second})
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	held, err := other.Obtain(ctx, key)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Obtain(ctx, key)
		waited <- err
	}()
	require.Eventually(t, func() bool { return c.notify.sleeping.Load() == 1 }, 2*time.Second, 5*time.Millisecond)

	srv.Pause()
	hung := time.Now()
	select {
	case err := <-waited:
		assert.ErrorIs(t, err, ErrBreakerOpen, "woken by the opening, and refused")
	case <-time.After(9 * time.Second):
		t.Fatal("the waiter still sleeps on a release message the hung node will never send")
	}
	bound := 2 * (c.livenessEvery() + time.Duration(DefaultBreakerFailures)*callTimeout)
	assert.LessOrEqual(t, opened.at.Load().Sub(hung), bound, "opened %s after the hang", opened.at.Load().Sub(hung))
	srv.Resume()
	require.Eventually(t, func() bool { return b.State() == BreakerClosed }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, held.Release(ctx))
}
