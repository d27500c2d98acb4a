package locking

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
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

// Two holders taking {a,b} and {b,a} a thousand times each, from two Clients (two
// connection pools, as two processes) and from one Client (its waiters queue in the process
// first): canonical order means neither ever holds one key while the other holds the
// second, so every iteration succeeds well inside its wait, and the two never overlap.
func TestMultiOppositeOrdersNeverDeadlock(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "two clients"
		if shared {
			name = "one client"
		}
		t.Run(name, func(t *testing.T) {
			verifyNoLeaks(t)
			const rounds = 1000
			opts := &Options{Wait: 10 * time.Second}
			clients := []*Client{newClient(t, nil, opts), newClient(t, nil, opts)}
			if shared {
				clients[1] = clients[0]
			}
			ctx := ctxT(t, 3*time.Minute) // the generous overall deadline: never stuck
			a, b := uniqueKey(t), uniqueKey(t)
			orders := [][]KeyFloor{kf(a, b), kf(b, a)}
			var (
				inside atomic.Int32
				done   [2]int
				wg     sync.WaitGroup
			)
			start := time.Now()
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						m, err := clients[g].ObtainMany(ctx, orders[g])
						if !assert.NoError(t, err, "iteration %d of holder %d", done[g], g) {
							return
						}
						if n := inside.Add(1); n != 1 {
							assert.Fail(t, "two holders inside", "%d", n)
						}
						inside.Add(-1)
						if !assert.NoError(t, m.Release(ctx)) {
							return
						}
						done[g]++
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, [2]int{rounds, rounds}, done)
			t.Logf("%d ObtainMany+Release of two keys in opposite orders in %s", 2*rounds, time.Since(start))
			assert.Zero(t, exists(t, clients[0], a, b), "nothing left held")
		})
	}
}

// A Multi over {a,b} excludes single locks on a and on b, and a single lock on b keeps a
// Multi over {a,b} out, leaving a free. A waiter on b gets in once the Multi is released.
func TestMultiExcludesSingleLock(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	other := newClient(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)

	m, err := c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	for _, k := range []string{a, b} {
		_, err := other.TryObtain(ctx, k)
		require.ErrorIs(t, err, ErrNotObtained, k)
		_, err = other.TryObtainFair(ctx, k)
		require.ErrorIs(t, err, ErrNotObtained, k)
		_, err = other.TryObtainMany(ctx, kf(k))
		require.ErrorIs(t, err, ErrNotObtained, k)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := other.Obtain(ctx, b)
		assert.NoError(t, err)
		got <- l
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("b obtained while the Multi holds it")
	default:
	}
	require.NoError(t, m.Release(ctx))
	var lb *Lock
	select {
	case lb = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter on b was not let in by the release")
	}
	require.NotNil(t, lb)
	assert.Greater(t, lb.Token(), m.Token(b), "the single lock's token follows the Multi's")

	// Now b is held by a single lock: a Multi over {a,b} is refused and leaves a free.
	_, err = c.TryObtainMany(ctx, kf(a, b))
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Zero(t, exists(t, c, a), "a given back")
	la, err := other.TryObtain(ctx, a)
	require.NoError(t, err, "a is free")
	require.NoError(t, la.Release(ctx))
	require.NoError(t, lb.Release(ctx))
}

// One key held elsewhere: when the wait ends (the wait limit, or the caller's context),
// nothing is left held in Redis, the keys taken before it are given back, and the key held
// elsewhere still belongs to its holder.
func TestMultiAllOrNothing(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	other := newClient(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	a, b, z := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	lb, err := other.Obtain(ctx, b)
	require.NoError(t, err)

	t.Run("wait limit", func(t *testing.T) {
		start := time.Now()
		_, err := c.ObtainMany(ctx, kf(z, b, a), WithWait(300*time.Millisecond))
		require.ErrorIs(t, err, ErrNotObtained)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the wait limit, not the context, ended it")
		assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		assert.Less(t, time.Since(start), 2*time.Second)
		assert.Zero(t, exists(t, c, a, z), "the keys taken before b were given back")
	})
	t.Run("context", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := c.ObtainMany(cctx, kf(a, b, z))
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Zero(t, exists(t, c, a, z))
	})
	t.Run("try", func(t *testing.T) {
		_, err := c.TryObtainMany(ctx, kf(a, b, z))
		require.ErrorIs(t, err, ErrNotObtained)
		assert.Zero(t, exists(t, c, a, z))
	})
	owners, err := c.rdb.HKeys(ctx, c.RedisKey(b)).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{lb.h.owner}, owners, "b still belongs to its holder")
	require.NoError(t, lb.Err())
	require.NoError(t, lb.Release(ctx))

	// A Redis error on a later key (its lock hash is not a hash): the error is returned as
	// it is (not ErrNotObtained), and the keys taken before it are given back.
	require.NoError(t, c.rdb.Set(ctx, c.RedisKey(z), "not a hash", time.Minute).Err())
	_, err = c.ObtainMany(ctx, kf(a, b, z))
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotObtained)
	assert.ErrorContains(t, err, "WRONGTYPE")
	assert.Zero(t, exists(t, c, a, b), "a and b given back after the Redis error on z")
}

// The loss of one key ends the whole hold: Done closes, the contexts are cancelled with a
// *KeyLostError naming the key, Err returns it (wrapping ErrLost), the Lost hook runs for
// every key, and Release frees the keys still held.
func TestMultiLossOfOneKey(t *testing.T) {
	for _, how := range []string{"deleted", "taken over"} {
		t.Run(how, func(t *testing.T) {
			verifyNoLeaks(t)
			const lease = 600 * time.Millisecond
			var lost lostRecorder
			var lostKeys sync.Map
			c := newClient(t, nil, &Options{Lease: lease, CallTimeout: 100 * time.Millisecond,
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
	t.Run("redis paused", func(t *testing.T) {
		verifyNoLeaks(t)
		srv := redistest.Start(t)
		const lease = 900 * time.Millisecond
		c := newClient(t, srv, &Options{Lease: lease, CallTimeout: 100 * time.Millisecond})
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

// A key taken early is lost while a later one is awaited: the wait ends at once with the
// loss, and nothing is left held.
func TestMultiLossDuringWait(t *testing.T) {
	verifyNoLeaks(t)
	const lease = 600 * time.Millisecond
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: 100 * time.Millisecond})
	other := newClient(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	// a sorts before b, so it is taken first and renewed while b is awaited (two uniqueKeys
	// sort by their counter's digits: "-10" before "-9").
	base := uniqueKey(t)
	a, b := base+"/a", base+"/b"
	lb, err := other.Obtain(ctx, b)
	require.NoError(t, err)
	defer lb.Release(ctx)

	go func() {
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, c.rdb.Del(ctx, c.RedisKey(a)).Err())
	}()
	start := time.Now()
	_, err = c.ObtainMany(ctx, kf(a, b), WithWait(5*time.Second))
	require.ErrorIs(t, err, ErrNotObtained)
	var kl *KeyLostError
	require.ErrorAs(t, err, &kl)
	assert.Equal(t, a, kl.Key)
	assert.ErrorIs(t, err, ErrLost)
	assert.NotErrorIs(t, err, context.Canceled, "the loss, not a context, ended the wait")
	assert.Less(t, time.Since(start), 100*time.Millisecond+lease/3+200*time.Millisecond, "ended at the renewal, not the wait limit")
	assert.Zero(t, exists(t, c, a))
	require.NoError(t, lb.Err())
}

// While the later key is awaited for longer than a lease, the watchdog renews the keys
// already taken: the Multi is obtained whole once the later key is freed.
func TestMultiRenewsWhileWaiting(t *testing.T) {
	verifyNoLeaks(t)
	const lease = 600 * time.Millisecond
	var renewed atomic.Int64
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: 100 * time.Millisecond,
		Hooks: Hooks{Renewed: func(string) { renewed.Add(1) }}})
	other := newClient(t, nil, &Options{Lease: 5 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	// a sorts before b, so it is taken first and renewed while b is awaited (two uniqueKeys
	// sort by their counter's digits: "-10" before "-9").
	base := uniqueKey(t)
	a, b := base+"/a", base+"/b"
	lb, err := other.Obtain(ctx, b)
	require.NoError(t, err)
	go func() {
		time.Sleep(4 * lease)
		assert.NoError(t, lb.Release(ctx))
	}()
	start := time.Now()
	m, err := c.ObtainMany(ctx, kf(b, a), WithWait(5*time.Second))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 4*lease)
	assert.GreaterOrEqual(t, renewed.Load(), int64(3), "a renewed while b was awaited")
	require.NoError(t, m.Err())
	for _, k := range []string{a, b} {
		ttl, err := c.rdb.PTTL(ctx, c.RedisKey(k)).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, lease/3, "%s alive", k)
	}
	require.NoError(t, m.Release(ctx))
}

// Tokens: one per key, each above its own floor, strictly increasing per key across Multis
// and single locks alike; WithFloor applies to every key.
func TestMultiTokensAndFloors(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 20*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)

	m, err := c.ObtainMany(ctx, []KeyFloor{{Key: a, Floor: 100}, {Key: b}})
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{a: 101, b: 1}, m.Tokens())
	assert.Equal(t, int64(101), m.Token(a))
	assert.Equal(t, int64(1), m.Token(b))
	assert.Zero(t, m.Token("not-a-key"))
	require.NoError(t, m.Release(ctx))

	last := map[string]int64{a: 101, b: 1}
	for i := range 50 {
		if i%3 == 0 { // single locks in between: one counter per key
			l, err := c.Obtain(ctx, b)
			require.NoError(t, err)
			require.Greater(t, l.Token(), last[b])
			last[b] = l.Token()
			require.NoError(t, l.Release(ctx))
		}
		m, err := c.ObtainMany(ctx, []KeyFloor{{Key: a, Floor: 50}, {Key: b, Floor: 0}})
		require.NoError(t, err)
		for k, tok := range m.Tokens() {
			require.Greater(t, tok, last[k], "%s strictly increasing", k)
			last[k] = tok
		}
		require.NoError(t, m.Release(ctx))
	}

	m, err = c.ObtainMany(ctx, []KeyFloor{{Key: a, Floor: 5000}, {Key: b, Floor: 10}})
	require.NoError(t, err)
	assert.Equal(t, int64(5001), m.Token(a), "a floor above the counter")
	assert.Equal(t, last[b]+1, m.Token(b), "a floor below the counter changes nothing")
	require.NoError(t, m.Release(ctx))

	m, err = c.ObtainMany(ctx, kf(a, b), WithFloor(9000))
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{a: 9001, b: 9001}, m.Tokens())
	require.NoError(t, m.Release(ctx))

	// Redis lost the counters: the floors still keep the tokens above what the caller stored.
	require.NoError(t, c.rdb.Del(ctx, KeysOf(DefaultKeyPrefix, a).Fence, KeysOf(DefaultKeyPrefix, b).Fence).Err())
	m, err = c.ObtainMany(ctx, []KeyFloor{{Key: a, Floor: 9001}, {Key: b, Floor: 9001}})
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{a: 9002, b: 9002}, m.Tokens())
	require.NoError(t, m.Release(ctx))
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

// Duplicate keys are merged (the greatest floor wins) and held once.
func TestMultiDuplicateKeys(t *testing.T) {
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 5*time.Second)
	a, b := uniqueKey(t)+"-a", uniqueKey(t)+"-b"
	m, err := c.ObtainMany(ctx, []KeyFloor{{Key: b}, {Key: a}, {Key: b, Floor: 9}, {Key: a, Floor: 3}, {Key: b, Floor: 4}})
	require.NoError(t, err)
	assert.Equal(t, []string{a, b}, m.Keys(), "sorted, once each")
	assert.Equal(t, map[string]int64{a: 4, b: 10}, m.Tokens())
	for _, k := range m.Keys() {
		owners, err := c.rdb.HGetAll(ctx, c.RedisKey(k)).Result()
		require.NoError(t, err)
		assert.Equal(t, map[string]string{m.owner: "1"}, owners, "%s held once", k)
	}
	require.NoError(t, m.Release(ctx))
	assert.Zero(t, exists(t, c, a, b))
}

// Refusals before any Redis call: no keys, the key "", an ended context, a closed Client.
func TestMultiRefusals(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxT(t, 5*time.Second)
	srv.Stop() // any Redis call would fail with a connection error
	_, err := c.ObtainMany(ctx, nil)
	assert.ErrorIs(t, err, ErrNoKeys)
	_, err = c.TryObtainMany(ctx, []KeyFloor{})
	assert.ErrorIs(t, err, ErrNoKeys)
	_, err = c.ObtainMany(ctx, kf("a", "", "b"))
	assert.ErrorIs(t, err, ErrEmptyKey)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.ObtainMany(ended, kf("a"))
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.Canceled)
	closed := New(newRedis(t, srv), nil)
	require.NoError(t, closed.Close())
	_, err = closed.ObtainMany(ctx, kf("a"))
	assert.ErrorIs(t, err, ErrClosed)
	_, err = c.ObtainMany(ctx, kf("a"))
	require.Error(t, err, "with Redis down the call reaches Redis and fails")
	assert.NotErrorIs(t, err, ErrNotObtained)
}

// A Multi is not re-entered: Obtain of one of its keys under its context fails at once
// instead of waiting for its own key, as does ObtainMany under a Lock's context on one of
// the keys; other keys are obtained normally, and a detached context of a released Multi
// obtains anew.
func TestMultiNotReentered(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	a, b, z := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	work := m.Context(ctx)

	start := time.Now()
	_, err = c.Obtain(work, a)
	require.ErrorIs(t, err, ErrNotObtained)
	require.ErrorIs(t, err, errInMulti)
	_, err = c.ObtainFair(work, b)
	require.ErrorIs(t, err, errInMulti)
	_, err = c.ObtainMany(work, kf(z, b))
	require.ErrorIs(t, err, errInMulti)
	assert.Less(t, time.Since(start), time.Second, "refused at once, not after a wait")
	assert.Zero(t, exists(t, c, z), "nothing taken")

	lz, err := c.Obtain(work, z)
	require.NoError(t, err, "a key outside the Multi")
	_, err = c.ObtainMany(lz.Context(ctx), kf(z))
	require.ErrorIs(t, err, errInLock)
	require.NoError(t, lz.Release(ctx))

	detached := context.WithoutCancel(work)
	require.NoError(t, m.Release(ctx))
	l, err := c.Obtain(detached, a)
	require.NoError(t, err, "a released Multi's detached context obtains anew")
	require.NoError(t, l.Release(ctx))
	m2, err := c.ObtainMany(detached, kf(a, b))
	require.NoError(t, err)
	require.NoError(t, m2.Release(ctx))
}

// The hooks: Acquired once per key with its token, Renewed per key, Released once per key.
func TestMultiHooks(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex
	acquired := map[string]int64{}
	renewed := map[string]int{}
	released := map[string]int{}
	const lease = 600 * time.Millisecond
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: 100 * time.Millisecond, Hooks: Hooks{
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

// On a three-master Cluster, with one key on each master (three slots on three nodes): the
// Multi holds all three (each excludes single locks from another Client), renews them over
// several leases, tells the loss of the key on one node, and Release frees them all. A
// second Multi in the opposite order, from another Client, waits and gets in after.
func TestMultiCluster(t *testing.T) {
	verifyNoLeaks(t)
	cl := redistest.StartCluster(t)
	const prefix, lease = "mc:", 900 * time.Millisecond
	rdb := redistest.ClusterClient(t, cl)
	keys := keysOnMasters(t, rdb, prefix, 3)
	opts := &Options{KeyPrefix: prefix, Lease: lease, CallTimeout: 150 * time.Millisecond}
	c := New(rdb, opts)
	defer c.Close()
	other := New(redistest.ClusterClient(t, cl), opts)
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)

	m, err := c.ObtainMany(ctx, kf(keys...))
	require.NoError(t, err)
	for _, k := range keys {
		assert.Positive(t, m.Token(k))
		_, err := other.TryObtain(ctx, k)
		require.ErrorIs(t, err, ErrNotObtained, k)
	}
	reversed := kf(keys[2], keys[1], keys[0])
	got := make(chan *Multi, 1)
	go func() {
		m2, err := other.ObtainMany(ctx, reversed)
		assert.NoError(t, err)
		got <- m2
	}()
	time.Sleep(3 * lease) // renewals on three nodes keep the hold
	require.NoError(t, m.Err())
	require.NoError(t, m.Release(ctx))
	var m2 *Multi
	select {
	case m2 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the second Multi did not get in after the release")
	}
	require.NotNil(t, m2)
	for _, k := range keys {
		assert.Greater(t, m2.Token(k), m.Token(k))
	}

	// The key on one node is deleted: the hold ends, naming it.
	lostKey := keys[1]
	require.NoError(t, rdb.Del(ctx, KeysOf(prefix, lostKey).Hash).Err())
	select {
	case <-m2.Done():
	case <-time.After(2 * lease):
		t.Fatal("the loss was not noticed")
	}
	var kl *KeyLostError
	require.ErrorAs(t, m2.Err(), &kl)
	assert.Equal(t, lostKey, kl.Key)
	require.ErrorIs(t, m2.Release(ctx), ErrNotHeld)
	for _, k := range keys {
		n, err := rdb.Exists(ctx, KeysOf(prefix, k).Hash).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s freed", k)
	}
}

// evalEach loads a script that a node does not know (NOSCRIPT) and still answers every key.
func TestMultiScriptFlushed(t *testing.T) {
	c := newClient(t, nil, &Options{Lease: 600 * time.Millisecond, CallTimeout: 100 * time.Millisecond})
	ctx := ctxT(t, 10*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	require.NoError(t, c.rdb.ScriptFlush(ctx).Err())
	time.Sleep(600 * time.Millisecond) // renewals after the flush
	require.NoError(t, m.Err())
	require.NoError(t, c.rdb.ScriptFlush(ctx).Err())
	require.NoError(t, m.Release(ctx))
	assert.Zero(t, exists(t, c, a, b))
}

// In spin mode (no subscription) a Multi waits by polling, key by key, and gets in once the
// holder of its keys releases them.
func TestMultiSpin(t *testing.T) {
	verifyNoLeaks(t)
	c := newClient(t, nil, nil)
	spinner := newClient(t, nil, &Options{Spin: &SpinOptions{}})
	ctx := ctxT(t, 10*time.Second)
	a, b := uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, kf(a, b))
	require.NoError(t, err)
	got := make(chan *Multi, 1)
	go func() {
		m2, err := spinner.ObtainMany(ctx, kf(b, a))
		assert.NoError(t, err)
		got <- m2
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, m.Release(ctx))
	select {
	case m2 := <-got:
		require.NotNil(t, m2)
		assert.Greater(t, m2.Token(a), m.Token(a))
		require.NoError(t, m2.Release(ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("the spinning Multi did not get in")
	}
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
