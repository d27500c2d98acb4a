package locking

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// kf returns the KeyFloors of names, floor 0.
func kf(names ...string) []KeyFloor {
	out := make([]KeyFloor, len(names))
	for i, n := range names {
		out[i] = KeyFloor{Key: n}
	}
	return out
}

// exists counts the lock hashes of names that exist in Redis.
func exists(t *testing.T, c *Client, names ...string) int64 {
	t.Helper()
	rk := make([]string, len(names))
	for i, n := range names {
		rk[i] = c.RedisKey(n)
	}
	n, err := c.rdb.Exists(context.Background(), rk...).Result()
	require.NoError(t, err)
	return n
}

// waitMultiDone waits for m.Done up to limit and returns how long it took.
func waitMultiDone(t *testing.T, m *Multi, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-m.Done():
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("Done not closed within %s", limit)
		return 0
	}
}

// The loss of one key ends the whole hold: Done closes, the contexts are cancelled with a
// *KeyLostError naming the key, Err returns it (wrapping ErrLost), the Lost hook runs for
// every key, and Release frees the keys still held.
func TestMultiLossOfOneKey(t *testing.T) {
	for _, how := range []string{"deleted", "taken over"} {
		t.Run(how, func(t *testing.T) {
			verifyNoLeaks(t)
			const lease = time.Second // with 250 ms calls: 100 ms ones timed out under load
			var lost lostRecorder
			var lostKeys sync.Map
			c := newClient(t, nil, &Options{Lease: lease, CallTimeout: lease / 4,
				Hooks: Hooks{Lost: func(k string, err error) { lostKeys.Store(k, true); lost.hook(k, err) }}})
			ctx := ctxT(t, 10*time.Second)
			a, b, z := uniqueKey(t), uniqueKey(t), uniqueKey(t)
			m, err := c.ObtainMany(ctx, kf(z, a, b))
			require.NoError(t, err)
			work := m.Context(ctx)
			time.Sleep(lease / 2) // a renewal or two first
			require.NoError(t, m.Err())

			if how == "deleted" {
				require.NoError(t, c.rdb.Del(ctx, c.RedisKey(b)).Err())
			} else {
				require.NoError(t, c.rdb.Del(ctx, c.RedisKey(b)).Err())
				require.NoError(t, c.rdb.HSet(ctx, c.RedisKey(b), newOwner(), 1).Err())
				require.NoError(t, c.rdb.PExpire(ctx, c.RedisKey(b), time.Minute).Err())
			}
			took := waitMultiDone(t, m, 2*lease)
			assert.Less(t, took, lease/3+100*time.Millisecond, "found at the next renewal")

			var kl *KeyLostError
			require.ErrorAs(t, m.Err(), &kl)
			assert.Equal(t, b, kl.Key)
			assert.ErrorIs(t, m.Err(), ErrLost)
			assert.ErrorIs(t, m.Err(), errTaken)
			assert.Contains(t, m.Err().Error(), b)
			require.ErrorIs(t, work.Err(), context.Canceled)
			assert.Equal(t, m.Err(), context.Cause(work))
			assert.ErrorIs(t, m.Context(ctx).Err(), context.Canceled, "a context taken after the loss is born cancelled")
			errs, _ := lost.get()
			assert.Len(t, errs, 3, "Lost once per key")
			for _, k := range []string{a, b, z} {
				_, ok := lostKeys.Load(k)
				assert.True(t, ok, "Lost hook for %s", k)
			}

			assert.Equal(t, int64(2), exists(t, c, a, z), "the other keys stay until Release")
			require.ErrorIs(t, m.Release(ctx), ErrNotHeld)
			assert.Zero(t, exists(t, c, a, z), "Release after the loss freed the keys still held")
			if how == "taken over" {
				assert.Equal(t, int64(1), exists(t, c, b), "the new holder of b is untouched")
			}
		})
	}
}

// The watchdog blocked: Redis paused (SIGSTOP), renewals time out, and the loss is declared
// before any key's lease can expire. With no watchdog (fixed lease) the hold ends just before
// the first key's lease runs out.
func TestMultiLossLeaseRunsOut(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	t.Run("redis paused", func(t *testing.T) {
		verifyNoLeaks(t)
		srv := redistest.Start(t)
		// The loss comes a call's time (500 ms, plus the drift) before the lease could run
		// out: with 100 ms calls that margin was less than a goroutine can wait for a CPU
		// under make test's load.
		const lease = 2 * time.Second
		c := newClient(t, srv, &Options{Lease: lease, CallTimeout: lease / 4})
		ctx := ctxT(t, 10*time.Second)
		a, b := uniqueKey(t), uniqueKey(t)
		m, err := c.ObtainMany(ctx, kf(a, b))
		require.NoError(t, err)
		work := m.Context(ctx)
		srv.Pause()
		paused := time.Now()
		waitMultiDone(t, m, 2*lease)
		assert.Less(t, time.Since(paused), lease, "declared before the leases can expire")
		srv.Resume()
		var kl *KeyLostError
		require.ErrorAs(t, m.Err(), &kl)
		assert.ErrorIs(t, kl, errUnreachable)
		assert.Contains(t, []string{a, b}, kl.Key)
		assert.Equal(t, m.Err(), context.Cause(work))
		assert.ErrorIs(t, m.Release(ctx), ErrNotHeld)
		assert.Zero(t, exists(t, c, a, b), "freed by Release once Redis answers again")
	})
	t.Run("fixed lease", func(t *testing.T) {
		verifyNoLeaks(t)
		const lease = 400 * time.Millisecond
		c := newClient(t, nil, &Options{Lease: lease, DisableWatchdog: true})
		ctx := ctxT(t, 10*time.Second)
		a, b := uniqueKey(t), uniqueKey(t)
		start := time.Now()
		m, err := c.ObtainMany(ctx, kf(b, a))
		require.NoError(t, err)
		waitMultiDone(t, m, 2*lease)
		assert.Less(t, time.Since(start), lease)
		var kl *KeyLostError
		require.ErrorAs(t, m.Err(), &kl)
		assert.Equal(t, a, kl.Key, "the first key's lease ends first")
		assert.ErrorIs(t, kl, errLeaseOver)
		assert.ErrorIs(t, m.Release(ctx), ErrNotHeld)
	})
}

// Release frees every key in Redis and wakes the waiters of each by the release message (a
// waiter's fallback timer is its holder's 10s lease: far beyond the test's limit).
func TestMultiReleaseWakesWaiters(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: 10 * time.Second})
	waiter := newClient(t, nil, &Options{Lease: 10 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	m, err := c.ObtainMany(ctx, kf(keys...))
	require.NoError(t, err)
	assert.Equal(t, int64(3), exists(t, c, keys...))

	got := make(chan *Lock, len(keys))
	for _, k := range keys {
		go func() {
			l, err := waiter.Obtain(ctx, k)
			assert.NoError(t, err)
			got <- l
		}()
	}
	require.Eventually(t, func() bool { return waiter.notify.sleeping.Load() == int64(len(keys)) },
		5*time.Second, 5*time.Millisecond, "every waiter asleep")
	released := time.Now()
	require.NoError(t, m.Release(ctx))
	for range keys {
		select {
		case l := <-got:
			require.NotNil(t, l)
			assert.Less(t, time.Since(released), time.Second)
			require.NoError(t, l.Release(ctx))
		case <-time.After(3 * time.Second):
			t.Fatal("a waiter was not woken by the release")
		}
	}
	assert.Equal(t, int64(len(keys)), waiter.notify.wokenByMessage.Load())
	assert.Zero(t, waiter.notify.wokenByTimer.Load())
	assert.Zero(t, exists(t, c, keys...))
	assert.ErrorIs(t, m.Err(), ErrNotHeld)
	assert.ErrorIs(t, m.Release(ctx), ErrNotHeld, "double release")
	select {
	case <-m.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
}

// Release under an ended context still frees the keys (it gets CallTimeout of its own).
func TestMultiReleaseUnderEndedContext(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	work := m.Context(ctx)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, m.Release(ended))
	assert.Zero(t, exists(t, c, a, b))
	assert.ErrorIs(t, context.Cause(work), ErrNotHeld)

	m, err = c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	require.NoError(t, m.Release(m.Context(ctx)), "the Multi's own context, cancelled by Release itself")
	assert.Zero(t, exists(t, c, a, b))
}

// The hooks: Acquired once per key with its token, Renewed per key, Released once per key.
func TestMultiHooks(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex
	acquired := map[string]int64{}
	renewed := map[string]int{}
	released := map[string]int{}
	const lease = time.Second // with 250 ms calls: 100 ms ones timed out under load
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: lease / 4, Hooks: Hooks{
		Acquired: func(k string, tok int64, _ time.Duration) { mu.Lock(); acquired[k] = tok; mu.Unlock() },
		Renewed:  func(k string) { mu.Lock(); renewed[k]++; mu.Unlock() },
		Released: func(k string, _ time.Duration) { mu.Lock(); released[k]++; mu.Unlock() },
	}})
	ctx := ctxT(t, 10*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	time.Sleep(2 * lease)
	require.NoError(t, m.Release(ctx))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, m.Tokens(), acquired)
	assert.GreaterOrEqual(t, renewed[a], 2)
	assert.Equal(t, renewed[a], renewed[b], "one renewal renews both")
	assert.Equal(t, map[string]int{a: 1, b: 1}, released)
}

// A nil Multi answers like a nil Lock.
func TestNilMulti(t *testing.T) {
	var m *Multi
	ctx := context.Background()
	assert.ErrorIs(t, m.Release(ctx), ErrNotHeld)
	assert.ErrorIs(t, m.Err(), ErrNotHeld)
	assert.Nil(t, m.Keys())
	assert.Nil(t, m.Tokens())
	assert.Zero(t, m.Token("a"))
	<-m.Done()
	assert.ErrorIs(t, context.Cause(m.Context(ctx)), ErrNotHeld)
}

// A key found gone only by Release (before the watchdog's next renewal): the other keys are
// released all the same, Release returns ErrNotHeld, and the holder hears of that key as a
// loss (Lost hook), of the others as releases.
func TestMultiReleaseFindsKeyGone(t *testing.T) {
	var mu sync.Mutex
	lost := map[string]error{}
	released := map[string]int{}
	c := newClient(t, nil, &Options{Hooks: Hooks{
		Lost:     func(k string, err error) { mu.Lock(); lost[k] = err; mu.Unlock() },
		Released: func(k string, _ time.Duration) { mu.Lock(); released[k]++; mu.Unlock() },
	}})
	ctx := ctxT(t, 10*time.Second)
	a, b, z := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, kf(a, b, z))
	require.NoError(t, err)
	require.NoError(t, c.rdb.Del(ctx, c.RedisKey(b)).Err())
	require.ErrorIs(t, m.Release(ctx), ErrNotHeld)
	assert.Zero(t, exists(t, c, a, z), "the other keys released")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{a: 1, z: 1}, released)
	require.Len(t, lost, 1)
	var kl *KeyLostError
	require.ErrorAs(t, lost[b], &kl)
	assert.Equal(t, b, kl.Key)
	assert.ErrorIs(t, kl, errTaken)
}
