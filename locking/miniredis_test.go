package locking

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The storefront falls back to an in-process miniredis when no redis-server is available:
// the scripts and the pub/sub waiting must work there too.
func TestWorksOnMiniredis(t *testing.T) {
	verifyNoLeaks(t)
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, &Options{Lease: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	l, err := c.Obtain(ctx, key, WithFloor(41))
	require.NoError(t, err)
	assert.Equal(t, int64(42), l.Token())
	inner, err := c.Obtain(l.Context(ctx), key)
	require.NoError(t, err)
	ttl, err := inner.TTL(ctx)
	require.NoError(t, err)
	assert.Positive(t, ttl)
	_, err = c.TryObtain(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained)

	entered := make(chan *Lock, 1)
	go func() {
		w, err := c.Obtain(ctx, key)
		assert.NoError(t, err)
		entered <- w
	}()
	require.Eventually(t, func() bool { return c.notify.sleeping.Load() == 1 }, 2*time.Second, time.Millisecond)
	require.NoError(t, inner.Release(ctx))
	require.NoError(t, l.Release(ctx))
	select {
	case w := <-entered:
		assert.Equal(t, int64(43), w.Token())
		require.NoError(t, w.Release(ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not woken by the release message")
	}
	assert.Zero(t, c.notify.wokenByTimer.Load())
	assert.False(t, m.Exists(c.keysFor(key).hash))
}
