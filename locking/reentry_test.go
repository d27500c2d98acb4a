package locking

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReentrancyDepth3(t *testing.T) {
	verifyNoLeaks(t)
	var acquired, released atomic.Int64
	c := newClient(t, nil, &Options{Hooks: Hooks{
		Acquired: func(string, int64, time.Duration) { acquired.Add(1) },
		Released: func(string, time.Duration) { released.Add(1) },
	}})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	k := c.keysFor(key)

	l1, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	ctx1 := l1.Context(ctx)
	l2, err := c.Obtain(ctx1, key)
	require.NoError(t, err)
	ctx2, cancel := context.WithTimeout(l2.Context(ctx1), 5*time.Second) // derived contexts re-enter too
	defer cancel()
	l3, err := c.TryObtain(ctx2, key)
	require.NoError(t, err)
	assert.Equal(t, l1.Token(), l2.Token())
	assert.Equal(t, l1.Token(), l3.Token())
	count, err := c.rdb.HGet(ctx, k.hash, l1.h.owner).Int()
	require.NoError(t, err)
	assert.Equal(t, 3, count)

	// Another goroutine with a plain context waits, and so does another client.
	entered := make(chan *Lock, 2)
	other := newClient(t, nil, nil)
	for _, cl := range []*Client{c, other} {
		go func() {
			l, err := cl.Obtain(ctx, key)
			assert.NoError(t, err)
			entered <- l
		}()
	}
	time.Sleep(100 * time.Millisecond)

	require.NoError(t, l3.Release(ctx))
	require.NoError(t, l2.Release(ctx))
	assert.ErrorIs(t, l2.Release(ctx), ErrNotHeld)
	select {
	case <-entered:
		t.Fatal("a waiter entered before the last release")
	case <-time.After(100 * time.Millisecond):
	}
	assert.NoError(t, l1.Err(), "inner releases leave the lock held")
	assert.Error(t, ctx2.Err(), "the released inner lock's context is cancelled")
	assert.NoError(t, ctx1.Err(), "the outer lock's context is not")
	count, err = c.rdb.HGet(ctx, k.hash, l1.h.owner).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, count)

	released0 := time.Now()
	require.NoError(t, l1.Release(ctx))
	first := <-entered
	t.Logf("first waiter entered %s after the last release", time.Since(released0))
	assert.Greater(t, first.Token(), l1.Token())
	require.NoError(t, first.Release(ctx))
	second := <-entered
	require.NoError(t, second.Release(ctx))
	// l1 and c's waiter: re-entry fires neither hook (other has no hooks).
	assert.Equal(t, int64(2), acquired.Load(), "Acquired")
	assert.Equal(t, int64(2), released.Load(), "Released")
	assert.Zero(t, c.notify.wokenByTimer.Load()+other.notify.wokenByTimer.Load(), "waiters woke by message only")
}

func TestReentryOfLostLockFails(t *testing.T) {
	verifyNoLeaks(t)
	// A 1 s lease (calls bounded at 250 ms), not 300 ms: a shortened lease is only how soon
	// the watchdog sees the loss, and 75 ms calls time out under make test's load.
	c := newClient(t, nil, &Options{Lease: time.Second})
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	lockCtx := l.Context(ctx)
	require.NoError(t, c.rdb.Del(ctx, c.keysFor(key).hash).Err())
	<-l.Done()
	_, err = c.Obtain(lockCtx, key)
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestDetachedContextOfReleasedLockObtainsAnew(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	detached := context.WithoutCancel(l.Context(ctx)) // carries the lock, never cancelled
	require.NoError(t, l.Release(ctx))

	l2, err := c.Obtain(detached, key)
	require.NoError(t, err, "a released lock in the context does not block a new obtain")
	assert.Greater(t, l2.Token(), l.Token(), "a new acquisition, not a re-entry")
	require.NoError(t, l2.Release(ctx))
}

func TestReentryWithLostReplyLeavesNoHoldBehind(t *testing.T) {
	verifyNoLeaks(t)
	rdb := &lostReplies{Client: newRedis(t, nil)}
	c := New(rdb, &Options{Lease: 3 * time.Second})
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	k := c.keysFor(key)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)

	rdb.armed.Store(true)
	_, err = c.Obtain(l.Context(ctx), key) // the HINCRBY runs, its reply is lost
	require.Error(t, err)
	assert.False(t, rdb.armed.Load(), "the re-entry script ran")
	count, err := rdb.HGet(ctx, k.hash, l.h.owner).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, count, "the increment of the failed re-entry is taken back")

	// Should the undo fail too, Redis counts one hold more than the process has handles:
	// the last Release still frees the key at once.
	require.NoError(t, rdb.HIncrBy(ctx, k.hash, l.h.owner, 1).Err())
	other := newClient(t, nil, &Options{Lease: 3 * time.Second})
	got := make(chan *Lock, 1)
	go func() {
		l2, err := other.Obtain(ctx, key)
		assert.NoError(t, err)
		got <- l2
	}()
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	ours, err := rdb.HExists(ctx, k.hash, l.h.owner).Result()
	require.NoError(t, err)
	assert.False(t, ours, "the last Release drops every hold whatever Redis counts")
	select {
	case l2 := <-got:
		assert.Less(t, time.Since(released), time.Second, "the waiter is woken by the release, not the lease")
		assert.NoError(t, l2.Release(ctx))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
}

func TestInnerReleaseNeverFreesTheKey(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	k := c.keysFor(key)
	l1, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	l2, err := c.Obtain(l1.Context(ctx), key)
	require.NoError(t, err)
	// Redis counts fewer holds than the process has handles (an undo of a re-entry whose
	// increment had not run): an inner release must not free the lock.
	require.NoError(t, c.rdb.HSet(ctx, k.hash, l1.h.owner, 1).Err())
	require.NoError(t, l2.Release(ctx))
	assert.NoError(t, l1.Err())
	count, err := c.rdb.HGet(ctx, k.hash, l1.h.owner).Int()
	require.NoError(t, err, "the key is still there")
	assert.Equal(t, 1, count)
	_, err = newClient(t, nil, nil).TryObtain(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained, "still held")
	require.NoError(t, l1.Release(ctx))
	n, err := c.rdb.Exists(ctx, k.hash).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestFailedReentryThatWasTheLastHandleDeletesTheKey(t *testing.T) {
	verifyNoLeaks(t)
	var released atomic.Int64
	rdb := &lostReplies{Client: newRedis(t, nil)}
	c := New(rdb, &Options{Lease: 3 * time.Second, Hooks: Hooks{
		Released: func(string, time.Duration) { released.Add(1) },
	}})
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	k := c.keysFor(key)
	for _, fair := range []bool{false, true} {
		obtain := c.Obtain
		if fair {
			obtain = c.ObtainFair
		}
		l, err := obtain(ctx, key)
		require.NoError(t, err)
		// The outer handle is released while the re-entry is in flight, then the re-entry's
		// reply is lost: the re-entry was the last handle of the process.
		rdb.before = func() { assert.NoError(t, l.Release(ctx)) }
		rdb.armed.Store(true)
		_, err = obtain(l.Context(ctx), key)
		require.Error(t, err)
		n, err := rdb.Exists(ctx, k.hash).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "fair %v: the key is deleted, not left for a lease", fair)
	}
	assert.Equal(t, int64(2), released.Load(), "Released once per hold")
}

func TestDetachedContextOfReleasedLockObtainsAnewForEveryKind(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: time.Second})
	r := newRedlock(t, []*redis.Client{newRedis(t, nil)}, &Options{Lease: time.Second})
	ctx := ctxT(t, 10*time.Second)
	for name, obtain := range map[string]func(context.Context, string, ...ObtainOption) (*Lock, error){
		"core": c.Obtain, "fair": c.ObtainFair, "redlock": r.Obtain,
	} {
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			l, err := obtain(ctx, key)
			require.NoError(t, err)
			detached := context.WithoutCancel(l.Context(ctx)) // carries the lock, never cancelled
			require.NoError(t, l.Release(ctx))
			l2, err := obtain(detached, key)
			require.NoError(t, err, "a released lock in the context does not block a new obtain")
			assert.Greater(t, l2.Token(), l.Token(), "a new acquisition, not a re-entry")

			// A lock that was lost, then released: obtained anew as well.
			detached = context.WithoutCancel(l2.Context(ctx))
			require.NoError(t, c.rdb.Del(ctx, c.keysFor(key).hash).Err())
			select {
			case <-l2.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("loss not detected")
			}
			assert.ErrorIs(t, l2.Release(ctx), ErrNotHeld)
			l3, err := obtain(detached, key)
			require.NoError(t, err)
			assert.Greater(t, l3.Token(), l2.Token())
			require.NoError(t, l3.Release(ctx))
		})
	}
}
