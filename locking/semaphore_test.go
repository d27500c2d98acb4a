package locking

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSemaphore returns a Semaphore over rdb (a fresh shared-server client when nil), closed
// when t ends; its Options go through loaded.
func newSemaphore(t testing.TB, rdb redis.UniversalClient, permits int, opts *Options) *Semaphore {
	t.Helper()
	if rdb == nil {
		rdb = newRedis(t, nil)
	}
	s := NewSemaphore(rdb, permits, loaded(opts))
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// permitsHeld returns the number of permits of key in Redis.
func permitsHeld(t *testing.T, s *Semaphore, key string) int64 {
	t.Helper()
	n, err := s.c.rdb.ZCard(context.Background(), s.keysFor(key).hash).Result()
	require.NoError(t, err)
	return n
}

func TestSemaphoreAcquireRelease(t *testing.T) {
	s := newSemaphore(t, nil, 2, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)

	a, err := s.Acquire(ctx, key)
	require.NoError(t, err)
	b, err := s.TryAcquire(ctx, key)
	require.NoError(t, err)
	assert.Zero(t, a.Token(), "permits carry no fencing token")
	assert.Equal(t, key, b.Key())
	_, err = s.TryAcquire(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.EqualValues(t, 2, permitsHeld(t, s, key))

	ttl, err := a.TTL(ctx)
	require.NoError(t, err)
	assert.InDelta(t, DefaultLease, ttl, float64(time.Second))

	require.NoError(t, a.Release(ctx))
	assert.ErrorIs(t, a.Release(ctx), ErrNotHeld)
	_, err = a.TTL(ctx)
	assert.ErrorIs(t, err, ErrNotHeld)
	c, err := s.TryAcquire(ctx, key)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx))
	require.NoError(t, c.Release(ctx))
	assert.Zero(t, permitsHeld(t, s, key))
}

func TestSemaphoreNeverMoreThanN(t *testing.T) {
	verifyNoLeaks(t)
	const permits, workers, rounds = 3, 64, 4
	s := newSemaphore(t, nil, permits, &Options{Lease: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	var inside, most, total atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				p, err := s.Acquire(ctx, key)
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				total.Add(1)
				assert.NoError(t, p.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(permits), "more holders than permits")
	assert.Equal(t, int64(permits), most.Load(), "the permits were used")
	assert.EqualValues(t, workers*rounds, total.Load())
	assert.Zero(t, permitsHeld(t, s, key))
}

func TestSemaphoreStalledHolderLosesPermit(t *testing.T) {
	// A call timeout a loaded machine does not miss (the default for a 300ms lease, 50ms,
	// timed out once under a CPU hog), so a lease of four of them.
	const lease = time.Second
	s := newSemaphore(t, nil, 1, &Options{Lease: lease, CallTimeout: lease / 4})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	// The permit's lease runs from its acquisition (Redis's clock, read when the script ran,
	// after this instant) or from its last renewal, which is later: measured from before the
	// acquisition, the permit cannot come back before one lease, however slow the machine.
	// (Measured from after the watchdog's stop, as before, a slow machine shortened it.)
	sent := time.Now()
	stalled, err := s.Acquire(ctx, key)
	require.NoError(t, err)
	stalled.h.wd.stop() // the holder stops renewing (a paused or crashed process)
	// The wait limit bounds the other side: the permit came back before it.
	next, err := s.Acquire(ctx, key, WithWait(4*time.Second))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(sent), lease, "the permit came back only at the end of its lease")
	assert.ErrorIs(t, stalled.Release(ctx), ErrNotHeld, "the stalled holder's permit is gone")
	assert.EqualValues(t, 1, permitsHeld(t, s, key), "releasing a lost permit leaves the new holder's")
	require.NoError(t, next.Release(ctx))
}

func TestSemaphoreWatchdogRenewsAndSignalsLoss(t *testing.T) {
	// 1 s (renewals every 333 ms, calls bounded at 250 ms): at 300 ms a loaded make test saw a
	// renewal's 75 ms call time out and the permit lost within three leases.
	const lease = time.Second
	s := newSemaphore(t, nil, 1, &Options{Lease: lease})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	p, err := s.Acquire(ctx, key)
	require.NoError(t, err)
	time.Sleep(3 * lease)
	require.NoError(t, p.Err(), "renewed past three leases")
	ttl, err := p.TTL(ctx)
	require.NoError(t, err)
	assert.Positive(t, ttl)

	// Someone deletes the permit (FLUSH, failover): the next renewal reports the loss.
	require.NoError(t, s.c.rdb.Del(ctx, s.keysFor(key).hash).Err())
	select {
	case <-p.Done():
	case <-time.After(2 * lease):
		t.Fatal("loss not signalled")
	}
	assert.ErrorIs(t, p.Err(), ErrLost)
	assert.ErrorIs(t, p.Release(ctx), ErrNotHeld)
}

// replyLost makes script calls run in Redis but answer context.Canceled while armed: a
// context cancelled after the command was sent. Only a call that ran (no error) has its
// reply replaced: an EVALSHA answered NOSCRIPT (the script not yet cached on this server, as
// when the test runs alone) must reach Script.Run unchanged, so that it falls back to EVAL.
type replyLost struct{ armed atomic.Bool }

func (r *replyLost) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *replyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (r *replyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && r.armed.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return err
	}
}

func TestSemaphoreNoPermitLeakedOnCancel(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	s := newSemaphore(t, rdb, 2, &Options{Lease: 10 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	// A reply lost after the script took a permit: the permit is given back.
	hook := &replyLost{}
	rdb.AddHook(hook)
	hook.armed.Store(true)
	_, err := s.Acquire(ctx, key)
	hook.armed.Store(false)
	require.Error(t, err)
	assert.Zero(t, permitsHeld(t, s, key), "the permit of the lost reply was given back")
	ticket, err := rdb.Get(ctx, semKeys(s.keysFor(key))[2]).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, ticket, "the script did run")

	// Many waiters whose contexts end while both permits are held.
	a, err := s.Acquire(ctx, key)
	require.NoError(t, err)
	b, err := s.Acquire(ctx, key)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, time.Duration(5+rand.IntN(80))*time.Millisecond)
			defer cancel()
			_, err := s.Acquire(wctx, key)
			assert.ErrorIs(t, err, ErrNotObtained)
			assert.True(t, errors.Is(err, context.DeadlineExceeded))
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 2, permitsHeld(t, s, key))
	require.NoError(t, a.Release(ctx))
	require.NoError(t, b.Release(ctx))

	// Waiters cancelled while permits come and go: none is left behind.
	var holders sync.WaitGroup
	for i := range 48 {
		holders.Add(1)
		go func() {
			defer holders.Done()
			wctx, cancel := context.WithTimeout(ctx, time.Duration(1+i%20)*time.Millisecond)
			defer cancel()
			if p, err := s.Acquire(wctx, key); err == nil {
				time.Sleep(time.Millisecond)
				assert.NoError(t, p.Release(ctx))
			}
		}()
	}
	holders.Wait()
	assert.Zero(t, permitsHeld(t, s, key))
}

func TestSemaphoreKeysExpire(t *testing.T) {
	s := newSemaphore(t, nil, 1, &Options{Lease: time.Second})
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	p, err := s.Acquire(ctx, key)
	require.NoError(t, err)
	k := s.keysFor(key)
	for _, name := range semKeys(k) {
		ttl, err := s.c.rdb.PTTL(ctx, name).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, name)
		assert.LessOrEqual(t, ttl, time.Second, name)
	}
	require.NoError(t, p.Release(ctx))
}

// Semaphores with different leases share a key: a permit of the shorter lease, taken, renewed
// and given back, never shortens the keys under the longer lease's permit, so that permit
// still counts once the shorter lease has run out, and no more than N are held.
func TestSemaphoreMixedLeases(t *testing.T) {
	long := newSemaphore(t, nil, 2, nil)
	short := newSemaphore(t, nil, 2, &Options{Lease: 300 * time.Millisecond})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	a, err := long.Acquire(ctx, key)
	require.NoError(t, err)
	b, err := short.Acquire(ctx, key)
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond) // b's watchdog renews it (every 100ms)
	require.NoError(t, b.Release(ctx))
	time.Sleep(700 * time.Millisecond) // past the short lease
	assert.EqualValues(t, 1, permitsHeld(t, long, key), "the long lease's permit is still held")
	c, err := short.TryAcquire(ctx, key)
	require.NoError(t, err)
	_, err = short.TryAcquire(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained, "two permits are held: the long lease's and c")
	require.NoError(t, c.Release(ctx))
	require.NoError(t, a.Release(ctx))
}
