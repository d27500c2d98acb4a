package locking

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// eventuallyWaiters polls l.Waiters until it answers want or five seconds pass.
func eventuallyWaiters(t *testing.T, ctx context.Context, l *Lock, want int, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := l.Waiters(ctx)
		require.NoError(t, err)
		return got == want
	}, 5*time.Second, 5*time.Millisecond, "Waiters should become %d: %s", want, why)
}

// waiters is l.Waiters, which must not fail.
func waiters(t *testing.T, ctx context.Context, l *Lock) int {
	t.Helper()
	n, err := l.Waiters(ctx)
	require.NoError(t, err)
	return n
}

// waitFor starts an Obtain of key by c that waits (at most wait), and returns its result channel.
func waitFor(ctx context.Context, c *Client, key string, wait time.Duration) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, key, WithWait(wait))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	return got
}

// A holder learns when an Obtain of another process waits for its key, and when it stops
// waiting: by giving up, or by taking the lock. A TryObtain that fails never counts, and the
// holder's own entry never counts for itself.
func TestWaitersByAnotherClient(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 60*time.Second)
	holder, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := newRedis(t, srv)
	key := uniqueKey(t)
	waiting := holder.keysFor(key).waiting()

	l, err := holder.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Zero(t, waiters(t, ctx, l), "nobody waits")

	_, err = other.TryObtain(ctx, key)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Zero(t, waiters(t, ctx, l), "a TryObtain does not wait, so it does not count")

	// A waiter that gives up leaves the set at once.
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := waitFor(wctx, other, key, time.Minute)
	eventuallyWaiters(t, ctx, l, 1, "another client's Obtain waits")
	cancel()
	require.ErrorIs(t, <-gaveUp, ErrNotObtained)
	assert.Zero(t, waiters(t, ctx, l), "the waiter gave up and left the set")

	// A waiter that takes the lock leaves the set, and does not see itself as waiting.
	took := make(chan *Lock, 1)
	go func() {
		nl, err := other.Obtain(ctx, key, WithWait(time.Minute))
		assert.NoError(t, err)
		took <- nl
	}()
	eventuallyWaiters(t, ctx, l, 1, "a second waiter")
	require.NoError(t, l.Release(ctx))
	nl := <-took
	require.NotNil(t, nl)
	assert.Zero(t, waiters(t, ctx, nl), "the new holder is not waiting for itself")
	n, err := rdb.ZCard(ctx, waiting).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the waiting set is empty once its waiter holds the lock")
	exists, err := rdb.Exists(ctx, waiting).Result()
	require.NoError(t, err)
	assert.Zero(t, exists, "and Redis has dropped it")
	require.NoError(t, nl.Release(ctx))

	_, err = nl.Waiters(ctx)
	assert.ErrorIs(t, err, ErrNotHeld, "after release")
}

// A goroutine of the holder's own process that waits (a plain context, not the lock's) counts:
// the process's notifier knows its queued waiters before any of them has tried.
func TestWaitersBySameClient(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, srv, nil)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	first, second := waitFor(wctx, c, key, time.Minute), waitFor(wctx, c, key, time.Minute)
	// Each counts once it has tried; one queued behind the other before trying counts as
	// the Client's one: 1 or 2, never 0.
	require.Eventually(t, func() bool { return waiters(t, ctx, l) >= 1 }, 5*time.Second, 5*time.Millisecond,
		"two goroutines of the same Client wait")
	cancel()
	require.ErrorIs(t, <-first, ErrNotObtained)
	require.ErrorIs(t, <-second, ErrNotObtained)
	eventuallyWaiters(t, ctx, l, 0, "both gave up")
	require.NoError(t, l.Release(ctx))
}

// A waiter that died after its attempt (no give-up, no retry) counts only until its entry
// lapses: a little after the lease its attempt saw. The holder's watchdog keeps renewing.
func TestWaitersWaiterThatDiedLapses(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	// 1s: a 400ms lease bounded each Redis call at 50ms, and a loaded make test saw the first
	// Obtain time out (i/o timeout).
	lease := time.Second
	c := newClient(t, srv, &Options{Lease: lease})
	rdb := newRedis(t, srv)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)

	// The attempt of a process that dies right after it: acquire_waiting.lua, then nothing.
	k := c.keysFor(key)
	res, err := acquireWaitingScript.Run(ctx, rdb, []string{k.hash, k.fence, k.gone("dead"), k.waiting()},
		"dead", lease.Milliseconds(), "0", "0", c.interestMargin().Milliseconds()).Int64Slice()
	require.NoError(t, err)
	require.Equal(t, int64(0), res[0], "the lock is held: the attempt fails and records its owner")
	assert.Equal(t, 1, waiters(t, ctx, l), "the dead waiter counts while its entry lasts")
	eventuallyWaiters(t, ctx, l, 0, "its entry lapsed (lease seen + margin)")
	require.NoError(t, l.Err(), "the watchdog kept the lock meanwhile")
	require.NoError(t, l.Release(ctx))
}

// The fair lock's waiters are its queue, which a plain holder counts too; Redlock and the
// semaphore do not record theirs.
func TestWaitersByKind(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	key := uniqueKey(t)

	l, err := c.ObtainFair(ctx, key)
	require.NoError(t, err)
	assert.Zero(t, waiters(t, ctx, l))
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := other.ObtainFair(wctx, key, WithWait(time.Minute))
		got <- err
	}()
	eventuallyWaiters(t, ctx, l, 1, "a fair waiter is queued")
	cancel()
	require.Error(t, <-got)
	eventuallyWaiters(t, ctx, l, 0, "it left the queue")
	wctx, cancel = context.WithCancel(ctx)
	core := waitFor(wctx, other, key, time.Minute)
	eventuallyWaiters(t, ctx, l, 1, "an Obtain (not fair) of the same key waits too")
	cancel()
	require.ErrorIs(t, <-core, ErrNotObtained)
	require.NoError(t, l.Release(ctx))

	// A plain holder counts the fair waiters queued behind it (its release wakes them).
	plain, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	wctx, cancel = context.WithCancel(ctx)
	go func() {
		_, err := other.ObtainFair(wctx, key, WithWait(time.Minute))
		got <- err
	}()
	eventuallyWaiters(t, ctx, plain, 1, "a fair waiter is queued behind a plain holder")
	cancel()
	require.Error(t, <-got)
	eventuallyWaiters(t, ctx, plain, 0, "it left the queue")
	require.NoError(t, plain.Release(ctx))

	rl := NewRedlock([]redis.UniversalClient{newRedis(t, srv)}, nil)
	t.Cleanup(func() { _ = rl.Close() })
	r, err := rl.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	_, err = r.Waiters(ctx)
	assert.True(t, errors.Is(err, errors.ErrUnsupported), "Redlock: %v", err)
	require.NoError(t, r.Release(ctx))

	sem := NewSemaphore(newRedis(t, srv), 2, nil)
	t.Cleanup(func() { _ = sem.Close() })
	p, err := sem.Acquire(ctx, uniqueKey(t))
	require.NoError(t, err)
	_, err = p.Waiters(ctx)
	assert.True(t, errors.Is(err, errors.ErrUnsupported), "semaphore: %v", err)
	require.NoError(t, p.Release(ctx))
}

// Each waiting process counts once: three clients wait, three waiters; as each takes its turn,
// one fewer.
func TestWaitersCountsProcesses(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, srv, nil)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	took := make(chan *Lock, 3)
	for range 3 {
		other := newClient(t, srv, nil)
		go func() {
			nl, err := other.Obtain(ctx, key, WithWait(time.Minute))
			assert.NoError(t, err)
			took <- nl
		}()
	}
	eventuallyWaiters(t, ctx, l, 3, "three other clients wait")
	require.NoError(t, l.Release(ctx))
	for left := 2; left >= 0; left-- {
		nl := <-took
		require.NotNil(t, nl)
		eventuallyWaiters(t, ctx, nl, left, "one fewer after each turn")
		require.NoError(t, nl.Release(ctx))
	}
}
