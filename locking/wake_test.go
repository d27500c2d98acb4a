package locking

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// waitersOn returns how many waiters c has registered on key's channel.
func waitersOn(c *Client, key string) int {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	if st := c.notify.channels[c.keysFor(key).channel]; st != nil {
		return len(st.waiters)
	}
	return 0
}

func waitForWaiters(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return waitersOn(c, key) == n }, 2*time.Second, time.Millisecond)
}

// With a 10s lease, the TTL fallback would make a waiter sleep ~10s: entering within
// milliseconds shows the wake-up came from the release message. The test asserts that
// through the wake-up counters and logs the measured latency.
func TestWaiterWokenByReleaseMessage(t *testing.T) {
	verifyNoLeaks(t)
	const rounds = 30
	holder := newClient(t, nil, &Options{Lease: 10 * time.Second})
	waiter := newClient(t, nil, &Options{Lease: 10 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	var lat []time.Duration
	for range rounds {
		l, err := holder.Obtain(ctx, key)
		require.NoError(t, err)
		got := make(chan time.Time, 1)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			w, err := waiter.Obtain(ctx, key)
			got <- time.Now()
			if assert.NoError(t, err) {
				assert.NoError(t, w.Release(ctx))
			}
		}()
		waitForWaiters(t, waiter, key, 1)
		require.Eventually(t, func() bool { return waiter.notify.sleeping.Load() == 1 },
			2*time.Second, 100*time.Microsecond, "the waiter tried and sleeps")
		released := time.Now()
		require.NoError(t, l.Release(ctx))
		select {
		case at := <-got:
			lat = append(lat, at.Sub(released))
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not woken by the release")
		}
		<-finished
	}
	slices.Sort(lat)
	t.Logf("release-to-entry over %d handoffs: p50 %s, p90 %s, max %s",
		rounds, lat[rounds/2], lat[rounds*9/10], lat[rounds-1])
	assert.Zero(t, waiter.notify.wokenByTimer.Load(), "no wake-up by the TTL timer")
	// One per release; the waiter's own release message of the previous round, if delivered
	// late, may wake it once more (it then finds the lock held and sleeps again).
	woken := waiter.notify.wokenByMessage.Load()
	assert.GreaterOrEqual(t, woken, int64(rounds), "wake-ups by message")
	assert.LessOrEqual(t, woken, int64(2*rounds), "wake-ups by message")
	assert.Less(t, lat[rounds/2], 500*time.Millisecond, "far below the 10s TTL fallback")
}

// One release wakes one waiter of a process, not all of them.
func TestReleaseWakesOneWaiter(t *testing.T) {
	verifyNoLeaks(t)
	const waiters = 8
	c := newClient(t, nil, &Options{Lease: 10 * time.Second})
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	entered := make(chan *Lock)
	for range waiters {
		go func() {
			w, err := c.Obtain(ctx, key)
			assert.NoError(t, err)
			entered <- w
		}()
	}
	waitForWaiters(t, c, key, waiters)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, l.Release(ctx))
	for i := range waiters {
		w := <-entered
		time.Sleep(5 * time.Millisecond) // the others would have tried by now if woken
		assert.Equal(t, int64(i+1), c.notify.wokenByMessage.Load(), "wake-ups after %d releases", i+1)
		require.NoError(t, w.Release(ctx))
	}
	assert.Zero(t, c.notify.wokenByTimer.Load())
}

// A woken waiter that leaves without trying hands its wake-up on.
func TestWakeUpPassedOn(t *testing.T) {
	n := newNotifier(nil, nil, time.Second)
	st := &channelState{ready: make(chan struct{})}
	n.channels["ch"] = st
	w1 := &waiter{channel: "ch", wake: make(chan struct{}, 1)}
	w2 := &waiter{channel: "ch", wake: make(chan struct{}, 1)}
	st.waiters = []*waiter{w1, w2}

	n.mu.Lock()
	n.wakeOneLocked(st)
	n.mu.Unlock()
	assert.Len(t, w1.wake, 1)
	assert.Empty(t, w2.wake)

	n.unregister(w1, false) // its context ended before it tried
	assert.Len(t, w2.wake, 1)
	assert.True(t, w2.pending)

	n.tried(w2)
	n.unregister(w2, true)
	assert.Empty(t, st.waiters)
	assert.False(t, st.idleSince.IsZero())
}

func TestClose(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	c := New(rdb, nil)
	ctx := ctxT(t, 5*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	_, err = c.Obtain(ctx, key, WithWait(50*time.Millisecond)) // starts the subscription
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close twice")
	_, err = c.Obtain(ctx, key)
	assert.ErrorIs(t, err, ErrClosed)
	assert.NoError(t, l.Err(), "Close does not release held locks")
	require.NoError(t, l.Release(ctx))
}

// A subscription that stops answering (no PONG) is replaced, and waiters are still woken by
// release messages afterwards.
func TestUnresponsiveSubscriptionReplaced(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	c := newClient(t, srv, &Options{Lease: 10 * time.Second})
	c.notify.healthEvery = 100 * time.Millisecond
	holder := newClient(t, srv, &Options{Lease: 10 * time.Second})
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	l, err := holder.Obtain(ctx, key)
	require.NoError(t, err)
	entered := make(chan *Lock, 1)
	go func() {
		w, err := c.Obtain(ctx, key)
		assert.NoError(t, err)
		entered <- w
	}()
	waitForWaiters(t, c, key, 1)
	require.Eventually(t, func() bool { return c.notify.sleeping.Load() == 1 }, 2*time.Second, time.Millisecond)

	srv.Pause()
	require.Eventually(t, func() bool { return c.notify.resubscribes.Load() >= 1 }, 8*time.Second, 5*time.Millisecond)
	srv.Resume() // before the woken waiter's attempt times out
	require.Eventually(t, func() bool {
		c.notify.mu.Lock()
		defer c.notify.mu.Unlock()
		st := c.notify.channels[c.keysFor(key).channel]
		return st != nil && st.confirmed
	}, 3*time.Second, time.Millisecond, "subscribed again")
	require.Eventually(t, func() bool { return c.notify.sleeping.Load() == 1 }, 3*time.Second, time.Millisecond)

	byMessage := c.notify.wokenByMessage.Load()
	require.NoError(t, l.Release(ctx))
	select {
	case w := <-entered:
		require.NoError(t, w.Release(ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not woken after the subscription was replaced")
	}
	assert.Greater(t, c.notify.wokenByMessage.Load(), byMessage)
}
