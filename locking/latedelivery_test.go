package locking

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateScripts holds back the next script call while armed: the caller sees a timeout at once,
// as when its context ended while the command was still on its way, and the command reaches
// Redis only when deliver is called, after the caller's clean-up. This is the order a busy
// Redis can serve them in: the clean-up goes out on another pooled connection, and Redis
// reads that connection first (it was already in its list of ready sockets, for instance).
type lateScripts struct {
	*redis.Client
	armed atomic.Bool
	mu    sync.Mutex
	held  []func() error
}

// newLateScripts wraps rdb, with the acquire scripts cached on its server: a held-back
// EVALSHA must not meet NOSCRIPT when delivered (Script.Run's fallback to EVAL is past).
func newLateScripts(t *testing.T, rdb *redis.Client) *lateScripts {
	t.Helper()
	for _, s := range []*redis.Script{acquireScript, fairAcquireScript, semAcquireScript} {
		require.NoError(t, s.Load(context.Background(), rdb).Err())
	}
	return &lateScripts{Client: rdb}
}

func (l *lateScripts) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if l.armed.CompareAndSwap(true, false) {
		l.mu.Lock()
		l.held = append(l.held, func() error {
			return l.Client.EvalSha(context.Background(), sha, keys, args...).Err()
		})
		l.mu.Unlock()
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(context.DeadlineExceeded)
		return cmd
	}
	return l.Client.EvalSha(ctx, sha, keys, args...)
}

// deliver runs the held-back calls now, in Redis, as the late packets they stand for.
func (l *lateScripts) deliver(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	held := l.held
	l.held = nil
	l.mu.Unlock()
	require.NotEmpty(t, held, "a script call was held back")
	for _, run := range held {
		require.NoError(t, run())
	}
}

func TestLateAcquireAfterCleanUpTakesNothing(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	opts := &Options{Lease: 10 * time.Second}

	t.Run("lock", func(t *testing.T) {
		late := newLateScripts(t, newRedis(t, nil))
		c := New(late, opts)
		defer c.Close()
		key := uniqueKey(t)
		l, err := c.Obtain(ctx, key) // scripts cached on the server
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))

		late.armed.Store(true)
		_, err = c.Obtain(ctx, key)
		require.Error(t, err)
		late.deliver(t)
		n, err := late.Exists(ctx, c.keysFor(key).hash).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the late acquire took the lock for an owner that gave up")
		l, err = c.TryObtain(ctx, key)
		require.NoError(t, err, "the lock is free at once")
		require.NoError(t, l.Release(ctx))
	})

	t.Run("fair", func(t *testing.T) {
		late := newLateScripts(t, newRedis(t, nil))
		c := New(late, opts)
		defer c.Close()
		key := uniqueKey(t)
		holder, err := c.ObtainFair(ctx, key)
		require.NoError(t, err)

		late.armed.Store(true) // a waiter whose first attempt (joining the queue) is late
		_, err = c.ObtainFair(ctx, key)
		require.Error(t, err)
		late.deliver(t)
		n, err := late.LLen(ctx, c.keysFor(key).fair().queue).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the late attempt queued an owner that gave up")
		require.NoError(t, holder.Release(ctx))
		l, err := c.TryObtainFair(ctx, key)
		require.NoError(t, err, "nobody is queued: the lock is free at once")
		require.NoError(t, l.Release(ctx))

		late.armed.Store(true) // the same on a free lock: the late attempt would take it
		_, err = c.ObtainFair(ctx, key)
		require.Error(t, err)
		late.deliver(t)
		l, err = c.TryObtainFair(ctx, key)
		require.NoError(t, err, "the late attempt took nothing")
		require.NoError(t, l.Release(ctx))
	})

	t.Run("semaphore", func(t *testing.T) {
		late := newLateScripts(t, newRedis(t, nil))
		s := NewSemaphore(late, 1, opts)
		defer s.Close()
		key := uniqueKey(t)
		p, err := s.Acquire(ctx, key)
		require.NoError(t, err)
		require.NoError(t, p.Release(ctx))

		late.armed.Store(true)
		_, err = s.Acquire(ctx, key)
		require.Error(t, err)
		late.deliver(t)
		assert.Zero(t, permitsHeld(t, s, key), "the late acquire took a permit nobody holds")
		p, err = s.TryAcquire(ctx, key)
		require.NoError(t, err, "the permit is free at once")
		require.NoError(t, p.Release(ctx))
	})

	t.Run("redlock", func(t *testing.T) {
		_, rdbs := startNodes(t, 3)
		lates := make([]*lateScripts, len(rdbs))
		nodes := make([]redis.UniversalClient, len(rdbs))
		for i, rdb := range rdbs {
			lates[i] = newLateScripts(t, rdb)
			nodes[i] = lates[i]
		}
		r := NewRedlock(nodes, opts)
		defer r.Close()
		key := uniqueKey(t)
		l, err := r.Obtain(ctx, key)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		waitNoHolders(t, r, rdbs, key)

		for _, late := range lates {
			late.armed.Store(true)
		}
		_, err = r.Obtain(ctx, key)
		require.Error(t, err)
		for i, late := range lates {
			late.deliver(t)
			n, err := rdbs[i].Exists(ctx, r.RedisKey(key)).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "node %d: the late acquire took the lock for an owner that gave up", i)
		}
		l, err = r.TryObtain(ctx, key)
		require.NoError(t, err, "the lock is free at once on every node")
		require.NoError(t, l.Release(ctx))
	})
}
