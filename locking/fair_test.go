package locking

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queueLen returns the number of fair waiters queued for key.
func queueLen(t *testing.T, c *Client, key string) int64 {
	t.Helper()
	n, err := c.rdb.LLen(context.Background(), c.keysFor(key).fair().queue).Result()
	require.NoError(t, err)
	return n
}

// waitQueued waits until n fair waiters are queued for key.
func waitQueued(t *testing.T, c *Client, key string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return queueLen(t, c, key) == n }, 5*time.Second, time.Millisecond,
		"%d waiters queued", n)
}

func TestFairArrivalOrder(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)

	first, err := c.ObtainFair(ctx, key)
	require.NoError(t, err)
	const waiters = 20
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.ObtainFair(ctx, key)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			assert.NoError(t, l.Release(ctx))
		}()
		waitQueued(t, c, key, int64(i+1)) // arrival order is queue order
	}
	// Newcomers while the queue is non-empty do not overtake it, even when the lock is free.
	_, err = c.TryObtainFair(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained)
	messagesBefore := c.notify.messages.Load()
	require.NoError(t, first.Release(ctx))
	wg.Wait()

	want := make([]int, waiters)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, order, "served in arrival order")
	assert.Zero(t, queueLen(t, c, key))
	// One message per handoff, to the head only: a broadcast would deliver 20+19+...+1.
	assert.LessOrEqual(t, c.notify.messages.Load()-messagesBefore, int64(waiters+2))
	c.notify.mu.Lock()
	for ch := range c.notify.channels {
		assert.NotContains(t, ch, ":turn:", "a waiter's channel outlived its wait")
	}
	c.notify.mu.Unlock()
}

func TestFairWaiterThatGivesUpDoesNotBlock(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	holder, err := c.ObtainFair(ctx, key)
	require.NoError(t, err)
	quitter, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.ObtainFair(quitter, key)
		gaveUp <- err
	}()
	waitQueued(t, c, key, 1)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.ObtainFair(ctx, key)
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(t, c, key, 2)

	cancel()
	err = <-gaveUp
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.Canceled)
	assert.EqualValues(t, 1, queueLen(t, c, key), "the quitter left the queue")

	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	select {
	case l := <-got:
		assert.Less(t, time.Since(released), time.Second, "woken by the release, not by a timeout")
		assert.Greater(t, l.Token(), holder.Token())
		require.NoError(t, l.Release(ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter behind the quitter did not get the lock")
	}
}

func TestFairVanishedWaiterIsDropped(t *testing.T) {
	// The longest call timeout this queue timeout allows (a third): a shorter one fails a
	// call outright on a loaded machine running -race.
	const queueTimeout = time.Second
	c := newClient(t, nil, &Options{QueueTimeout: queueTimeout, CallTimeout: queueTimeout / 3})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	fk := c.keysFor(key).fair()

	// A waiter queued, then crashed: it never refreshes its place.
	now, err := c.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, c.rdb.RPush(ctx, fk.queue, "ghost").Err())
	require.NoError(t, c.rdb.ZAdd(ctx, fk.timeouts, redis.Z{Score: float64(now.Add(queueTimeout).UnixMilli()), Member: "ghost"}).Err())

	start := time.Now()
	l, err := c.ObtainFair(ctx, key)
	require.NoError(t, err)
	waited := time.Since(start)
	assert.Greater(t, waited, queueTimeout/2, "the ghost had its turn first")
	assert.Less(t, waited, queueTimeout+time.Second, "then it was dropped")
	assert.Zero(t, queueLen(t, c, key))
	require.NoError(t, l.Release(ctx))
}

func TestFairReentryFencingAndLoss(t *testing.T) {
	c := newClient(t, nil, &Options{Lease: time.Second})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)

	outer, err := c.ObtainFair(ctx, key, WithFloor(1000))
	require.NoError(t, err)
	assert.EqualValues(t, 1001, outer.Token(), "the floor applies")
	inner, err := c.ObtainFair(outer.Context(ctx), key)
	require.NoError(t, err)
	assert.Equal(t, outer.Token(), inner.Token(), "re-entry keeps the token")
	require.NoError(t, inner.Release(ctx))
	_, err = c.TryObtainFair(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained, "still held after the inner release")
	ttl, err := outer.TTL(ctx)
	require.NoError(t, err)
	assert.Positive(t, ttl)
	require.NoError(t, outer.Release(ctx))

	next, err := c.TryObtainFair(ctx, key)
	require.NoError(t, err)
	assert.Greater(t, next.Token(), outer.Token())
	require.NoError(t, c.rdb.Del(ctx, c.keysFor(key).hash).Err()) // the lock vanishes
	select {
	case <-next.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("loss not signalled")
	}
	assert.ErrorIs(t, next.Err(), ErrLost)
	assert.ErrorIs(t, next.Release(ctx), ErrNotHeld)
}

func TestFairMutualExclusion(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{Lease: 5 * time.Second})
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	var (
		mu     sync.Mutex
		inside int
		last   int64
		wg     sync.WaitGroup
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				l, err := c.ObtainFair(ctx, key)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				inside++
				assert.Equal(t, 1, inside, "two holders at once")
				assert.Greater(t, l.Token(), last)
				last = l.Token()
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				inside--
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, queueLen(t, c, key))
}

func TestIncludeScripts(t *testing.T) {
	assert.NotContains(t, include(fairAcquireLua, "acquire.lua", acquireLua), "--#include")
	assert.Equal(t, "a\nX\nb", include("a\n--#include x\nb", "x", "X"))
	assert.Panics(t, func() { include("no line", "x", "X") })
}

func TestFairSpinMode(t *testing.T) {
	c := newClient(t, nil, &Options{Spin: &SpinOptions{MaxBackoff: 5 * time.Millisecond}})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	first, err := c.ObtainFair(ctx, key)
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.ObtainFair(ctx, key)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, l.Release(ctx))
		}()
		waitQueued(t, c, key, int64(i+1))
	}
	require.NoError(t, first.Release(ctx))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order, "polling waiters keep their places too")
	c.notify.mu.Lock()
	assert.Nil(t, c.notify.ps, "spin mode never subscribes")
	c.notify.mu.Unlock()
}

// A fair waiter queued behind a plain holder (Obtain, or ObtainMany) is woken when that holder
// lets go, not by its own timer. Here its timer would come only after its whole wait: with a
// one-minute queue timeout and lease, a waiter comes back on its own after 20 s at the soonest,
// and it waits at most 10 s; so each ObtainFair below succeeds only because the release woke it.
func TestFairWaiterWokenByPlainRelease(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, &Options{QueueTimeout: time.Minute, Lease: time.Minute})
	ctx := ctxT(t, 30*time.Second)
	for _, release := range []string{"Obtain", "ObtainMany"} {
		t.Run(release, func(t *testing.T) {
			key := uniqueKey(t)
			var let func() error
			if release == "Obtain" {
				plain, err := c.Obtain(ctx, key)
				require.NoError(t, err)
				let = func() error { return plain.Release(ctx) }
			} else {
				m, err := c.ObtainMany(ctx, []KeyFloor{{Key: key}, {Key: uniqueKey(t)}})
				require.NoError(t, err)
				let = func() error { return m.Release(ctx) }
			}
			got := make(chan error, 1)
			go func() {
				l, err := c.ObtainFair(ctx, key, WithWait(10*time.Second))
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			waitQueued(t, c, key, 1)
			require.NoError(t, let())
			assert.NoError(t, <-got, "the plain release woke the fair waiter")
			assert.Zero(t, queueLen(t, c, key))
		})
	}
}

// A waiter that vanishes at the head of the queue (its process partitioned or killed: it can
// neither refresh its place nor leave) holds up the waiters behind it until its place lapses:
// by default no longer than the lease, as a vanished holder would. Here the lease is 1s; with
// the queue timeout's old default, 5s, the next waiter's 3s wait ran out first.
func TestFairVanishedHeadLapsesWithinLease(t *testing.T) {
	opts := &Options{Lease: time.Second, CallTimeout: 250 * time.Millisecond}
	a := newClient(t, nil, opts)
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	held, err := a.ObtainFair(ctx, key)
	require.NoError(t, err)

	rdb := newRedis(t, nil)
	b := New(rdb, opts)
	bctx, cancel := context.WithCancel(ctx)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		_, _ = b.ObtainFair(bctx, key)
	}()
	waitQueued(t, a, key, 1)
	require.NoError(t, rdb.Close()) // b vanishes: its calls no longer reach Redis
	cancel()
	<-bDone
	_ = b.Close()
	require.Equal(t, int64(1), queueLen(t, a, key), "the vanished waiter's place is still queued")

	c := newClient(t, nil, opts)
	got := make(chan error, 1)
	go func() {
		l, err := c.ObtainFair(ctx, key, WithWait(3*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitQueued(t, a, key, 2)
	require.NoError(t, held.Release(ctx))
	assert.NoError(t, <-got, "the next waiter had the lock once the vanished head's place lapsed")
}

// Clients with different leases, so different default queue timeouts, share a fair key: the
// one with the shorter timeout never shortens the queue's TTL under the longer one's place.
// Here the short waiter (lease 300ms: queue timeout 300ms) joins behind the long one (queue
// timeout 5s, refreshed every 1.7s) and leaves; well before the long one refreshes, and well
// after 300ms, the long one's place is still queued, and the release wakes it.
func TestFairMixedQueueTimeouts(t *testing.T) {
	holder := newClient(t, nil, nil)
	long := newClient(t, nil, nil)
	short := newClient(t, nil, &Options{Lease: 300 * time.Millisecond})
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	held, err := holder.ObtainFair(ctx, key)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		l, err := long.ObtainFair(ctx, key)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitQueued(t, holder, key, 1)
	longQueued := time.Now()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var left chan error
	join := func() {
		ch := make(chan error, 1)
		left = ch
		go func() {
			_, err := short.ObtainFair(sctx, key)
			ch <- err
		}()
	}
	join()
	// The short waiter's calls are bound at 75 ms (a quarter of its lease): under make test's
	// load one can fail, and its Obtain ends with the error before it is seen queued. What is
	// tested is the queue's expiry, not that call: it joins again.
	deadline := time.Now().Add(10 * time.Second)
	for queueLen(t, holder, key) != 2 {
		select {
		case err := <-left:
			t.Logf("the short waiter's Obtain ended before it was seen queued (%v): it joins again", err)
			join()
		default:
		}
		require.True(t, time.Now().Before(deadline), "2 waiters queued")
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-left
	time.Sleep(700 * time.Millisecond) // past the short queue timeout, before the long one's refresh
	if d := time.Since(longQueued); d > DefaultQueueTimeout/3 {
		t.Logf("%v since the long waiter queued: it may have refreshed its place meanwhile", d.Round(time.Millisecond))
	}
	require.Equal(t, int64(1), queueLen(t, holder, key), "the long waiter's place outlived the short one's timeout")
	require.NoError(t, held.Release(ctx))
	assert.NoError(t, <-got, "the long waiter took its turn")
}

// A lock hash without expiry (set by hand: PTTL -1) is not polled at once, again and again,
// by a fair waiter, nor by a plain one: each comes back after its usual period (a third of
// the queue timeout; the lease), so a 500ms wait makes a handful of attempts, not hundreds.
func TestLockWithoutExpiryNotPolledFast(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			rdb := newRedis(t, nil)
			c := New(rdb, &Options{Lease: 600 * time.Millisecond, DisableWatchdog: true})
			t.Cleanup(func() { _ = c.Close() })
			ctx := ctxT(t, 10*time.Second)
			key := uniqueKey(t)
			require.NoError(t, rdb.HSet(ctx, c.keysFor(key).hash, "someone-by-hand", 1).Err())
			counter := &countCommands{}
			rdb.AddHook(counter)
			obtain := c.Obtain
			if fair {
				obtain = c.ObtainFair
			}
			_, err := obtain(ctx, key, WithWait(500*time.Millisecond))
			require.ErrorIs(t, err, ErrNotObtained)
			assert.Less(t, counter.n.Load(), int64(40), "commands sent during the wait")
		})
	}
}
