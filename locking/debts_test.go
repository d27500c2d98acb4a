package locking

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// hungNode is a redis-server and a one-connection client of it behind a breaker: an attempt
// goes out on the one connection; its clean-up then needs a new connection, whose handshake
// the hung node never answers, so the clean-up is never sent (as TestBreakerHungRedis).
type hungNode struct {
	srv    *redistest.Server
	rdb    *redis.Client
	b      *Breaker
	paused bool
}

func startHungNode(t *testing.T, brk *Breakers) *hungNode {
	t.Helper()
	h := &hungNode{srv: redistest.Start(t)}
	o := h.srv.Options()
	o.PoolSize = 1
	h.rdb = redis.NewClient(o)
	t.Cleanup(func() { _ = h.rdb.Close() })
	h.b = brk.Watch(h.srv.Addr(), h.rdb)
	t.Cleanup(h.resume)
	return h
}

func (h *hungNode) pause() { h.srv.Pause(); h.paused = true }

func (h *hungNode) resume() {
	if h.paused {
		h.srv.Resume()
		h.paused = false
	}
}

// openWith makes try fail until h's breaker is open (at most 5 tries).
func (h *hungNode) openWith(t *testing.T, try func()) {
	t.Helper()
	for i := 0; i < 5 && h.b.State() == BreakerClosed; i++ {
		try()
	}
	require.NotEqual(t, BreakerClosed, h.b.State(), "failed calls in a row open it")
}

// closed waits for a probe to close h's breaker after the resume.
func (h *hungNode) closed(t *testing.T) {
	t.Helper()
	h.resume()
	require.Eventually(t, func() bool { return h.b.State() == BreakerClosed }, 5*time.Second, 5*time.Millisecond)
}

func newDebtBreakers(t *testing.T) *Breakers {
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = brk.Close() })
	return brk
}

// debtLease is long against the test: a key freed within seconds was freed by a clean-up.
const debtLease = 20 * time.Second

// The fair lock's clean-up of an attempt given up during a hang (leave the queue, drop the
// hold the attempt took when the node answers again) is owed and paid by the probe that
// closes the breaker: another process takes the lock at once, not after the lease.
func TestDebtFairLock(t *testing.T) {
	verifyNoLeaks(t)
	brk := newDebtBreakers(t)
	h := startHungNode(t, brk)
	c := New(h.rdb, &Options{Lease: debtLease, CallTimeout: 100 * time.Millisecond, Breakers: brk})
	defer c.Close()
	other := New(h.srv.Client(t), &Options{Lease: debtLease})
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	l, err := c.TryObtainFair(ctx, key) // the one connection exists
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	h.pause()
	h.openWith(t, func() { _, _ = c.TryObtainFair(ctx, key) })
	assert.Positive(t, c.debts.owed(c.keysFor(key)), "the attempt's clean-up did not reach the node")
	h.closed(t)
	var got *Lock
	require.Eventually(t, func() bool {
		got, err = other.TryObtainFair(ctx, key)
		return err == nil
	}, 3*time.Second, 10*time.Millisecond, "the key is held by a fair attempt given up during the hang")
	require.NoError(t, got.Release(ctx))
	assert.Zero(t, c.debts.owed(c.keysFor(key)))
}

// A semaphore permit taken by an attempt given up during a hang is given back by the owed
// clean-up once the node answers: another process gets the only permit at once.
func TestDebtSemaphore(t *testing.T) {
	verifyNoLeaks(t)
	brk := newDebtBreakers(t)
	h := startHungNode(t, brk)
	s := NewSemaphore(h.rdb, 1, &Options{Lease: debtLease, CallTimeout: 100 * time.Millisecond, Breakers: brk})
	defer s.Close()
	other := NewSemaphore(h.srv.Client(t), 1, &Options{Lease: debtLease})
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	l, err := s.TryAcquire(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	h.pause()
	h.openWith(t, func() { _, _ = s.TryAcquire(ctx, key) })
	assert.Positive(t, s.c.debts.owed(s.keysFor(key)), "the attempt's clean-up did not reach the node")
	h.closed(t)
	var got *Lock
	require.Eventually(t, func() bool {
		got, err = other.TryAcquire(ctx, key)
		return err == nil
	}, 3*time.Second, 10*time.Millisecond, "the only permit is held by an attempt given up during the hang")
	require.NoError(t, got.Release(ctx))
	assert.Zero(t, s.c.debts.owed(s.keysFor(key)))
}

// A Multi released while its node hangs: the release never reaches Redis and is owed (a
// forget per key); the probe that closes the breaker pays it, and another process takes
// both keys at once.
func TestDebtObtainManyRelease(t *testing.T) {
	verifyNoLeaks(t)
	brk := newDebtBreakers(t)
	h := startHungNode(t, brk)
	c := New(h.rdb, &Options{Lease: debtLease, CallTimeout: 100 * time.Millisecond, Breakers: brk})
	defer c.Close()
	other := New(h.srv.Client(t), &Options{Lease: debtLease})
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)
	kfs := []KeyFloor{{Key: a}, {Key: b}}
	m, err := c.TryObtainMany(ctx, kfs)
	require.NoError(t, err)

	h.pause()
	assert.Error(t, m.Release(ctx), "the release cannot reach the hung node")
	assert.Equal(t, 1, c.debts.owed(c.keysFor(a)))
	assert.Equal(t, 1, c.debts.owed(c.keysFor(b)))
	h.openWith(t, func() { _, _ = c.TryObtain(ctx, uniqueKey(t)) })
	h.closed(t)
	var got *Multi
	require.Eventually(t, func() bool {
		got, err = other.TryObtainMany(ctx, kfs)
		return err == nil
	}, 3*time.Second, 10*time.Millisecond, "the keys are still held by the Multi released during the hang")
	require.NoError(t, got.Release(ctx))
	assert.Zero(t, c.debts.owed(c.keysFor(a))+c.debts.owed(c.keysFor(b)))
}

// Redlock over three nodes, one of them hung: the lock is taken by the quorum of the other
// two, and its release (and the clean-up of the hung node's late acquire) cannot reach the
// hung node: owed to that node, paid when its breaker closes, so that the node, which ran
// the late acquire when it answered again, does not keep the key for a lease.
func TestDebtRedlock(t *testing.T) {
	verifyNoLeaks(t)
	brk := newDebtBreakers(t)
	var nodes []redis.UniversalClient
	for i := 0; i < 2; i++ {
		srv := redistest.Start(t)
		rdb := redis.NewClient(srv.Options())
		defer rdb.Close()
		brk.Watch(srv.Addr(), rdb)
		nodes = append(nodes, rdb)
	}
	h := startHungNode(t, brk)
	nodes = append(nodes, h.rdb)
	r := NewRedlock(nodes, &Options{Lease: debtLease, CallTimeout: 100 * time.Millisecond, Breakers: brk})
	defer r.Close()
	ctx := ctxT(t, 30*time.Second)
	l, err := r.TryObtain(ctx, uniqueKey(t)) // the hung node's one connection exists
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	key := uniqueKey(t)
	h.pause()
	l, err = r.Obtain(ctx, key)
	require.NoError(t, err, "a quorum of 2 of 3")
	require.NoError(t, l.Release(ctx))
	require.Eventually(t, func() bool { // the hung node's calls fail in the background
		if l, err := r.Obtain(ctx, uniqueKey(t)); err == nil {
			_ = l.Release(ctx)
		}
		return h.b.State() != BreakerClosed
	}, 5*time.Second, 10*time.Millisecond, "failed calls in a row open it")
	require.Eventually(t, func() bool { return r.c.debts.owed(r.c.keysFor(key)) > 0 }, 2*time.Second, 5*time.Millisecond,
		"the hung node's clean-up of the key is owed")
	h.closed(t)
	direct := h.srv.Client(t)
	k := KeysOf(DefaultKeyPrefix, key)
	require.Eventually(t, func() bool {
		n, err := direct.Exists(context.Background(), k.Hash).Result()
		return err == nil && n == 0
	}, 3*time.Second, 10*time.Millisecond, "the hung node keeps the key of a lock released during the hang")
	// A late clean-up of the hang (the release of the hung node's late acquire, bounded by a
	// call timeout) may fail just after the probe paid the debts: the next attempt on the
	// key pays what is left.
	l, err = r.TryObtain(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	assert.Zero(t, r.c.debts.owed(r.c.keysFor(key)))
}
