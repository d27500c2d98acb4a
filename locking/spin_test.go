package locking

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSpinMutualExclusion(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: 5 * time.Second, Spin: &SpinOptions{MaxBackoff: 10 * time.Millisecond}})
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	const workers, rounds = 32, 5
	var inside, total atomic.Int64
	var overlap atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.Obtain(ctx, key)
				if !assert.NoError(t, err) {
					return
				}
				if inside.Add(1) > 1 {
					overlap.Store(true)
				}
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				total.Add(1)
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.False(t, overlap.Load(), "two holders at once")
	assert.EqualValues(t, workers*rounds, total.Load())
	c.notify.mu.Lock()
	assert.Nil(t, c.notify.ps, "spin mode never subscribes")
	c.notify.mu.Unlock()
}

func TestSpinBoundedWait(t *testing.T) {
	const maxBackoff = 20 * time.Millisecond
	c := newClient(t, nil, &Options{Spin: &SpinOptions{MinBackoff: time.Millisecond, MaxBackoff: maxBackoff}})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	held, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	type result struct {
		l  *Lock
		at time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		assert.NoError(t, err)
		got <- result{l, time.Now()}
	}()
	time.Sleep(time.Second) // uncapped, the waiter's backoff would now be about a second
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	select {
	case r := <-got:
		assert.Less(t, r.at.Sub(released), maxBackoff+200*time.Millisecond, "taken within about MaxBackoff (plus -race scheduling)")
		assert.NoError(t, r.l.Release(ctx))
	case <-time.After(2 * time.Second):
		t.Fatal("the spinning waiter did not take the released lock")
	}
}

func TestSpinSleepBoundedByLease(t *testing.T) {
	// A holder that never releases (fixed 250ms lease): a waiter whose first backoff is 2.5
	// to 5 s still takes the lock right after the lease runs out, as its sleep is bounded by
	// the remaining lease the failed attempt returned.
	const lease = 250 * time.Millisecond
	holder := newClient(t, nil, &Options{Lease: lease, DisableWatchdog: true})
	c := newClient(t, nil, &Options{Spin: &SpinOptions{MinBackoff: 5 * time.Second, MaxBackoff: 10 * time.Second}})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	_, err := holder.Obtain(ctx, key)
	require.NoError(t, err)
	start := time.Now()
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), lease+2*time.Second, "an unbounded first sleep is at least 2.5 s")
	require.NoError(t, l.Release(ctx))
}

func TestSpinSleep(t *testing.T) {
	s := (&SpinOptions{MinBackoff: 4 * time.Millisecond, MaxBackoff: 32 * time.Millisecond}).withDefaults()
	for n, want := range []time.Duration{4, 8, 16, 32, 32, 32} {
		want *= time.Millisecond
		for range 20 {
			d := s.sleep(n, 0)
			assert.GreaterOrEqual(t, d, want/2)
			assert.LessOrEqual(t, d, want)
		}
	}
	assert.LessOrEqual(t, s.sleep(100, 3*time.Millisecond), 3*time.Millisecond, "bounded by the hint")
	d := (*SpinOptions)(nil).withDefaults()
	assert.Equal(t, DefaultSpinMinBackoff, d.MinBackoff)
	assert.Equal(t, DefaultSpinMaxBackoff, d.MaxBackoff)
}

func TestSpinSemaphore(t *testing.T) {
	s := newSemaphore(t, nil, 2, &Options{Spin: &SpinOptions{MaxBackoff: 5 * time.Millisecond}})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				p, err := s.Acquire(ctx, key)
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				assert.NoError(t, p.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(2))
}
