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
	"github.com/stockguard/stockguard/internal/testutil"
)

// Tests of ObtainMany's acquisition (multi_obtain.go); the hold's are in multi_test.go.

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

// A key taken early is lost while a later one is awaited: the wait ends at once with the
// loss, and nothing is left held.
func TestMultiLossDuringWait(t *testing.T) {
	verifyNoLeaks(t)
	const lease = time.Second // with 250 ms calls: 100 ms ones timed out under load
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: lease / 4})
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
	const lease = time.Second // with 250 ms calls: 100 ms ones timed out under load
	var renewed atomic.Int64
	c := newClient(t, nil, &Options{Lease: lease, CallTimeout: lease / 4,
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
	testutil.SkipShort(t, testutil.Fault)
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

// On a three-master Cluster, with one key on each master (three slots on three nodes): the
// Multi holds all three (each excludes single locks from another Client), renews them over
// several leases, tells the loss of the key on one node, and Release frees them all. A
// second Multi in the opposite order, from another Client, waits and gets in after.
func TestMultiCluster(t *testing.T) {
	verifyNoLeaks(t)
	cl := redistest.StartCluster(t)
	// A 1.2 s lease with 300 ms calls: the first Obtain on a fresh cluster, at 150 ms, timed
	// out in a clean-clone make test.
	const prefix, lease = "mc:", 1200 * time.Millisecond
	rdb := redistest.ClusterClient(t, cl)
	keys := keysOnMasters(t, rdb, prefix, 3)
	opts := &Options{KeyPrefix: prefix, Lease: lease, CallTimeout: lease / 4}
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
	c := newClient(t, nil, &Options{Lease: time.Second, CallTimeout: 250 * time.Millisecond})
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
