package locking

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestObtainRelease(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)

	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, key, l.Key())
	assert.Positive(t, l.Token())
	assert.NoError(t, l.Err())

	ttl, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.InDelta(t, DefaultLease, ttl, float64(time.Second))

	owners, err := c.rdb.HGetAll(ctx, "lock:{"+key+"}").Result()
	require.NoError(t, err)
	require.Len(t, owners, 1)
	for owner, count := range owners {
		random, process, ok := strings.Cut(owner, plainProcessSep)
		require.True(t, ok, "the owner names its process: %q", owner)
		assert.Len(t, random, 32, "128 random bits")
		assert.Equal(t, c.Process(), process)
		p, takeover := HolderProcess(owner)
		assert.Equal(t, c.Process(), p)
		assert.False(t, takeover, "an Obtain without WithTakeover cannot be taken over")
		assert.Equal(t, "1", count)
	}

	_, err = c.TryObtain(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained)

	require.NoError(t, l.Release(ctx))
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld, "double release")
	_, err = l.TTL(ctx)
	assert.ErrorIs(t, err, ErrNotHeld)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after release")
	}
	n, err := c.rdb.Exists(ctx, "lock:{"+key+"}").Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	l2, err := c.TryObtain(ctx, key)
	require.NoError(t, err)
	assert.Greater(t, l2.Token(), l.Token())
	require.NoError(t, l2.Release(ctx))
}

func TestNilLock(t *testing.T) {
	var l *Lock
	assert.ErrorIs(t, l.Release(context.Background()), ErrNotHeld)
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	assert.Zero(t, l.Token())
	_, err := l.TTL(context.Background())
	assert.ErrorIs(t, err, ErrNotHeld)
	<-l.Done()
	assert.Error(t, l.Context(context.Background()).Err())
}

func TestMutualExclusion64Goroutines(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	const workers, rounds = 64, 5
	var (
		mu      sync.Mutex
		inside  int
		overlap bool
		total   int
		last    int64
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.Obtain(ctx, key)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				inside++
				overlap = overlap || inside > 1
				assert.Greater(t, l.Token(), last, "fencing tokens increase")
				last = l.Token()
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				inside--
				total++
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.False(t, overlap, "two holders at once")
	assert.Equal(t, workers*rounds, total)
}

func TestObtainWaitLimitAndContext(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	defer l.Release(ctx)

	start := time.Now()
	_, err = c.Obtain(ctx, key, WithWait(100*time.Millisecond))
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.False(t, errors.Is(err, context.DeadlineExceeded))
	assert.Less(t, time.Since(start), time.Second)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.Obtain(short, key)
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestHolderWithoutExpiryIsNotPolledFast(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: 10 * time.Second})
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	require.NoError(t, c.rdb.HSet(ctx, c.keysFor(key).hash, newOwner(), 1).Err()) // no PEXPIRE
	_, err := c.Obtain(ctx, key, WithWait(300*time.Millisecond))
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.Zero(t, c.notify.wokenByTimer.Load(), "slept for a lease, not 1ms at a time")
}

func TestReleaseWithEndedContextStillDeletesTheKey(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: 3 * time.Second})
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}},
		{"deadline too short", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 51*time.Millisecond)
		}},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			reqCtx, cancel := tc.ctx()
			defer cancel()
			l, err := c.Obtain(reqCtx, key)
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond) // the request timed out while holding the lock
			if tc.name == "cancelled" {
				cancel()
			}
			require.NoError(t, l.Release(reqCtx), "defer l.Release(reqCtx) after the request ended")
			n, err := c.rdb.Exists(context.Background(), c.keysFor(key).hash).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "the key is deleted, not left for a lease without a watchdog")
		})
	}
}

// ended reads a passed deadline as the end of the wait even before the context's own timer
// has fired (the network deadline that go-redis derives from it can fire first).
func TestEndedBeforeTheContextTimerFires(t *testing.T) {
	assert.NoError(t, ended(context.Background()))
	// A context whose deadline has passed but whose Err is still nil, as in the moment
	// between the network deadline firing and the context's timer.
	late := timerNotFired{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	assert.NoError(t, late.Err())
	assert.ErrorIs(t, ended(late), context.DeadlineExceeded)
	future, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	assert.NoError(t, ended(future))
	cancelled, cancel3 := context.WithCancel(context.Background())
	cancel3()
	assert.ErrorIs(t, ended(cancelled), context.Canceled)
}

type timerNotFired struct {
	context.Context
	deadline time.Time
}

func (c timerNotFired) Deadline() (time.Time, bool) { return c.deadline, true }
