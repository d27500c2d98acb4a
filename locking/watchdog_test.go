package locking

import (
	"context"
	"errors"
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

// lostRecorder records the Lost hook.
type lostRecorder struct {
	mu   sync.Mutex
	errs []error
	at   time.Time
}

func (r *lostRecorder) hook(_ string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
	r.at = time.Now()
}

func (r *lostRecorder) get() ([]error, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...), r.at
}

// waitDone waits for l.Done up to limit and returns how long it took.
func waitDone(t *testing.T, l *Lock, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Done():
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("Done not closed within %s", limit)
		return 0
	}
}

func TestWatchdogHoldsFiveLeases(t *testing.T) {
	verifyNoLeaks(t)
	const lease = 600 * time.Millisecond
	var renewed atomic.Int64
	var lost lostRecorder
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: 150 * time.Millisecond,
		Hooks: Hooks{Renewed: func(string) { renewed.Add(1) }, Lost: lost.hook}})
	other := newClient(t, nil, &Options{Lease: lease})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	lockCtx := l.Context(ctx)
	end := time.Now().Add(5 * lease)
	for time.Now().Before(end) {
		_, err := other.TryObtain(ctx, key)
		require.ErrorIs(t, err, ErrNotObtained)
		errs, _ := lost.get()
		require.NoError(t, l.Err(), "lost: %v", errs)
		require.NoError(t, lockCtx.Err())
		time.Sleep(lease / 5)
	}
	assert.GreaterOrEqual(t, renewed.Load(), int64(10), "renewed about every lease/3")
	assert.Equal(t, renewed.Load(), l.Renewals(), "the lock counts the renewals its hooks were told of")
	assert.Equal(t, lease, l.Lease())
	require.NoError(t, l.Release(ctx))
	assert.ErrorIs(t, lockCtx.Err(), context.Canceled)
	assert.ErrorIs(t, context.Cause(lockCtx), ErrNotHeld)
}

func TestWatchdogOffLeaseExpires(t *testing.T) {
	verifyNoLeaks(t)
	// 1s, not less: a Redis call may take a quarter of the lease, and a loaded make test saw
	// the Obtain's call of a 300ms lease (75ms) time out.
	const lease = time.Second
	var lost lostRecorder
	c := newClient(t, nil, &Options{Lease: lease, DisableWatchdog: true, Hooks: Hooks{Lost: lost.hook}})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	start := time.Now()
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	// The holder is told just before the lease ends...
	waitDone(t, l, 2*lease)
	assert.Less(t, time.Since(start), lease, "Done closes before the lease runs out")
	assert.Equal(t, ErrLost, l.Err())
	errs, _ := lost.get()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], errLeaseOver)

	// ...and the next holder gets in once it has.
	l2, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), lease-5*time.Millisecond)
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld, "the expired lock cannot be released")
	require.NoError(t, l2.Err(), "and its release did not touch the new holder")
	require.NoError(t, l2.Release(ctx))
}

func TestReleaseByNonOwnerFails(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	k := c.keysFor(key)
	left, err := releaseScript.Run(ctx, c.rdb, []string{k.hash}, newOwner(), k.channel, "0").Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(-1), left)
	ttl, err := l.TTL(ctx)
	require.NoError(t, err, "the lock is still held")
	assert.Positive(t, ttl)
	require.NoError(t, l.Release(ctx))
}

func TestLossDetected(t *testing.T) {
	const lease = 600 * time.Millisecond
	for _, tc := range []struct {
		name  string
		steal func(ctx context.Context, c *Client, k keys) error
	}{
		{"deleted", func(ctx context.Context, c *Client, k keys) error {
			return c.rdb.Del(ctx, k.hash).Err()
		}},
		{"stolen", func(ctx context.Context, c *Client, k keys) error {
			_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, k.hash)
				p.HSet(ctx, k.hash, newOwner(), 1)
				p.PExpire(ctx, k.hash, time.Minute)
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var lost lostRecorder
			c := newClient(t, nil, &Options{Lease: lease, Hooks: Hooks{Lost: lost.hook}})
			ctx := ctxT(t, 10*time.Second)
			key := uniqueKey(t)
			l, err := c.Obtain(ctx, key)
			require.NoError(t, err)
			lockCtx := l.Context(ctx)

			require.NoError(t, tc.steal(ctx, c, c.keysFor(key)))
			took := waitDone(t, l, 2*lease)
			t.Logf("loss detected %s after the %s", took, tc.name)
			assert.Less(t, took, lease/3+100*time.Millisecond)
			assert.Equal(t, ErrLost, l.Err())
			assert.ErrorIs(t, lockCtx.Err(), context.Canceled)
			assert.ErrorIs(t, context.Cause(lockCtx), ErrLost)
			assert.ErrorIs(t, context.Cause(lockCtx), errTaken)
			errs, _ := lost.get()
			require.Len(t, errs, 1)
			assert.ErrorIs(t, errs[0], ErrLost)
			select {
			case <-l.h.wd.done:
			case <-time.After(time.Second):
				t.Fatal("the watchdog did not stop")
			}
			assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)
			_, err = l.TTL(ctx)
			assert.ErrorIs(t, err, ErrNotHeld)
		})
	}
}

func TestLossDeclaredBeforeExpiryWhenRedisPaused(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	// A 2 s lease with 500 ms calls: the loss is declared a call's time (plus the drift)
	// before the lease could run out. With a 1 s lease that margin was about 110 ms, less than
	// a goroutine can wait for a CPU under make test's load (run 8).
	const lease = 2 * time.Second
	var lost lostRecorder
	c := newClient(t, srv, &Options{Lease: lease, CallTimeout: lease / 4, Hooks: Hooks{Lost: lost.hook}})
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	time.Sleep(lease / 2) // at least one renewal

	srv.Pause()
	defer srv.Resume()
	pausedAt := time.Now()
	waitDone(t, l, 2*lease)
	errs, at := lost.get()
	lastSent := time.Unix(0, l.h.wd.lastSent.Load())
	expiresNoSoonerThan := lastSent.Add(lease)
	t.Logf("paused at +0; loss declared at +%s; lease could expire at +%s (margin %s)",
		at.Sub(pausedAt), expiresNoSoonerThan.Sub(pausedAt), expiresNoSoonerThan.Sub(at))
	assert.True(t, at.Before(expiresNoSoonerThan), "loss declared before the lease could expire")
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], errUnreachable)
	assert.Equal(t, ErrLost, l.Err())

	srv.Resume()
	start := time.Now()
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)
	assert.Less(t, time.Since(start), 2*c.callTimeout+50*time.Millisecond, "release is bounded")
}

func TestRedisRestartedMidHold(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	const lease = 600 * time.Millisecond
	c := newClient(t, srv, &Options{Lease: lease})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	token := l.Token()

	srv.Restart(t) // empty: the lock and its fencing counter are gone
	took := waitDone(t, l, 2*lease)
	t.Logf("loss detected %s after the restart", took)
	assert.Equal(t, ErrLost, l.Err())
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)

	// Scripts are loaded again (EVALSHA falls back to EVAL); the floor keeps tokens rising.
	var l2 *Lock
	require.Eventually(t, func() bool {
		l2, err = c.Obtain(ctx, key, WithFloor(token))
		return err == nil
	}, 2*time.Second, 20*time.Millisecond, "obtain after restart: %v", err)
	assert.Equal(t, token+1, l2.Token())
	require.NoError(t, l2.Release(ctx))
}

func TestWatchdogStopsOnRelease(t *testing.T) {
	verifyNoLeaks(t)
	// A 1 s lease (calls bounded at 250 ms): at 300 ms (75 ms calls) a loaded make test timed
	// out the Obtain. The lease's length is not what this test is about.
	c := newClient(t, nil, &Options{Lease: time.Second})
	ctx := ctxT(t, 5*time.Second)
	l, err := c.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	select {
	case <-l.h.wd.done:
	default:
		t.Fatal("Release returned before the watchdog ended")
	}
	assert.False(t, errors.Is(l.Err(), ErrLost))
}

func TestReleaseOfStolenLockReportsLossOnce(t *testing.T) {
	verifyNoLeaks(t)
	var lost lostRecorder
	var released atomic.Int64
	c := newClient(t, nil, &Options{Hooks: Hooks{Lost: lost.hook,
		Released: func(string, time.Duration) { released.Add(1) }}})
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	require.NoError(t, c.rdb.Del(ctx, c.keysFor(key).hash).Err()) // the watchdog renews only in 10s

	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)
	errs, _ := lost.get()
	require.Len(t, errs, 1, "the holder hears of the loss once")
	assert.ErrorIs(t, errs[0], errTaken)
	assert.Zero(t, released.Load(), "a lost lock is not reported released")
}
