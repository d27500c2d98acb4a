package locking

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/netfault"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// transitions records a breaker's states.
type transitions struct {
	mu     sync.Mutex
	states []BreakerState
}

func (tr *transitions) record(_ string, st BreakerState) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.states = append(tr.states, st)
}

func (tr *transitions) get() []BreakerState {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]BreakerState(nil), tr.states...)
}

// A Redis that hangs (SIGSTOP) opens its breaker after three timed-out calls; from then on a
// lock call fails at once with ErrBreakerOpen, a waiter sleeping on a release message is woken
// and fails too (instead of waiting out its wait limit as for a busy lock), and once the node
// answers a probe closes the breaker. The attempts that timed out while it hung run when it
// answers again; their clean-up is paid before the next attempt on the key, which takes the
// lock at once instead of waiting out a lease held by nobody.
func TestBreakerHungRedis(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	var tr transitions
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, OnState: tr.record})
	defer brk.Close()
	// One connection: the first attempt's acquire goes out on it; its clean-up then needs a
	// new connection, whose handshake the hung node never answers, so it is never sent.
	o := srv.Options()
	o.PoolSize = 1
	rdb := redis.NewClient(o)
	defer rdb.Close()
	b := brk.Watch("node", rdb)
	const lease = 20 * time.Second
	c := New(rdb, &Options{Lease: lease, CallTimeout: 100 * time.Millisecond, Wait: 10 * time.Second, Breakers: brk})
	defer c.Close()
	other := New(srv.Client(t), &Options{Lease: lease}) // no breaker: the other process
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)

	busy, ghost := uniqueKey(t), uniqueKey(t)
	held, err := other.Obtain(ctx, busy)
	require.NoError(t, err)
	defer func() { _ = held.Release(context.Background()) }()
	waited := make(chan error, 1)
	go func() { // waits for the busy key: a release message, or its wait limit of 10s
		_, err := c.Obtain(ctx, busy)
		waited <- err
	}()
	require.Eventually(t, func() bool { return c.notify.sleeping.Load() == 1 }, 2*time.Second, 5*time.Millisecond)

	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	// Three failed calls in a row open it: the first attempt reaches the node (its acquire,
	// the handshake of a new connection and its clean-up time out), the breaker is open
	// within three.
	_, err = c.TryObtain(ctx, ghost)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrBreakerOpen, "the first attempt reached the node")
	for i := 0; i < 2 && b.State() == BreakerClosed; i++ {
		_, _ = c.TryObtain(ctx, ghost)
	}
	opened := time.Now()
	assert.Equal(t, BreakerOpen, b.State(), "three timeouts in a row")

	start := time.Now()
	_, err = c.TryObtain(ctx, ghost)
	assert.ErrorIs(t, err, ErrBreakerOpen)
	assert.Less(t, time.Since(start), 50*time.Millisecond, "refused at once")

	select {
	case err := <-waited:
		assert.ErrorIs(t, err, ErrBreakerOpen, "the waiter tried again and was refused")
		assert.NotErrorIs(t, err, ErrNotObtained)
		assert.Less(t, time.Since(opened), time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter still sleeps on a release message the hung node will never send")
	}

	srv.Resume()
	paused = false
	require.Eventually(t, func() bool { return b.State() == BreakerClosed }, 2*time.Second, 5*time.Millisecond, "a probe closes it")
	states := tr.get()
	assert.Equal(t, BreakerOpen, states[0])
	assert.Contains(t, states, BreakerHalfOpen)
	assert.Equal(t, BreakerClosed, states[len(states)-1])

	// The attempt of the hang has now run in Redis, and took the key for an owner nobody has
	// (its clean-up was never sent). The probe that closed the breaker had the Client pay
	// that debt: another process takes the key at once, not after a lease of 20s.
	var l *Lock
	require.Eventually(t, func() bool {
		l, err = other.TryObtain(ctx, ghost)
		return err == nil
	}, 2*time.Second, 10*time.Millisecond, "the key is held by an attempt given up during the hang")
	require.NoError(t, l.Release(ctx))
}

// A holder whose renewals hang is told before its lease can end, breaker or not: the open
// breaker refuses the renewals at once and the watchdog keeps its loss deadline. Its loss
// leaves the key to a forget, owed while the breaker is open and paid once Redis answers.
func TestBreakerHolderToldBeforeLeaseEnds(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond})
	defer brk.Close()
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	b := brk.Watch("node", rdb)
	// 500 ms calls (60 ms timed the first Obtain out under stress-ng) and a 3 s lease: the
	// loss deadline (lease − drift − call, about 2.45 s) leaves over half a second to the
	// lease's end for the holder to be told on a loaded machine.
	const lease = 3 * time.Second
	c := New(rdb, &Options{Lease: lease, CallTimeout: 500 * time.Millisecond, Breakers: brk})
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	obtained := time.Now()

	resume := hangAndOpen(t, srv, c, b)
	select {
	case <-l.Done():
		assert.ErrorIs(t, l.Err(), ErrLost)
		assert.Less(t, time.Since(obtained), lease, "told before the lease could end")
	case <-time.After(2 * lease):
		t.Fatal("the holder was not told")
	}
	resume()
	require.Eventually(t, func() bool { return b.State() == BreakerClosed }, 2*time.Second, 5*time.Millisecond)
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)
	// The loss left the key to its forget; the next holder takes it at once.
	l2, err := c.TryObtain(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
}

// Reply errors (a script error, a missing key) are answers: they never open a breaker; a
// caller that gave up (a cancelled context) says nothing of the node either.
func TestBreakerCountsOnlyNodeFailures(t *testing.T) {
	brk := NewBreakers(nil)
	defer brk.Close()
	rdb := newRedis(t, nil)
	b := brk.Watch("node", rdb)
	ctx := ctxT(t, 5*time.Second)
	for i := 0; i < 10; i++ {
		assert.ErrorIs(t, rdb.Get(ctx, uniqueKey(t)).Err(), redis.Nil)
		assert.Error(t, rdb.Do(ctx, "NOSUCHCOMMAND").Err())
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for i := 0; i < 10; i++ {
		assert.Error(t, rdb.Ping(cancelled).Err())
	}
	assert.Equal(t, BreakerClosed, b.State())
	assert.Equal(t, map[string]BreakerState{"node": BreakerClosed}, brk.States())
	assert.True(t, errors.Is(rdb.Ping(ctx).Err(), nil))
}

// On a Cluster each master has its breaker (WatchCluster): a hung master fails the locks of
// its slots at once while the locks of the other masters' slots are taken as before. The
// master hangs for this client only: its connections go through a link that is then
// black-holed (SIGSTOP would also trip the cluster's own failure detection, 1s in these
// tests, which soon refuses every slot: a loaded machine lost that race).
func TestBreakerPerClusterMaster(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	cl := redistest.StartCluster(t)
	hung := cl.Nodes[0]
	link, err := netfault.NewLink(hung.Addr)
	require.NoError(t, err)
	defer link.Close()
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond})
	defer brk.Close()
	var d net.Dialer
	o := &redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == hung.Addr {
				addr = link.Addr
			}
			return d.DialContext(ctx, network, addr)
		}}
	brk.WatchCluster(o)
	rdb := redis.NewClusterClient(o)
	defer rdb.Close()
	// A call timeout a loaded machine does not miss on a healthy master (60ms did once, in
	// the set-up): the black-holed master is no race against the cluster's own detection.
	c := New(rdb, &Options{Lease: 10 * time.Second, CallTimeout: 500 * time.Millisecond})
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)

	// One key per master, found through the cluster's slot map.
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < len(cl.Nodes) && i < 1000; i++ {
		key := uniqueKey(t)
		m, err := rdb.MasterForKey(ctx, c.RedisKey(key))
		require.NoError(t, err)
		if _, ok := byMaster[m.Options().Addr]; !ok {
			byMaster[m.Options().Addr] = key
			l, err := c.Obtain(ctx, key) // the node clients exist, each with its breaker
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
	}
	require.Len(t, byMaster, len(cl.Nodes))
	require.NoError(t, link.Blackhole())

	for i := 0; i < 5 && brk.States()[hung.Addr] == BreakerClosed; i++ {
		_, _ = c.TryObtain(ctx, byMaster[hung.Addr])
	}
	_, err = c.TryObtain(ctx, byMaster[hung.Addr])
	assert.ErrorIs(t, err, ErrBreakerOpen, "the hung master's slots fail at once: refused before anything is sent")
	for addr, key := range byMaster {
		if addr == hung.Addr {
			continue
		}
		l, err := c.TryObtain(ctx, key)
		require.NoError(t, err, "a healthy master's slot: %s", addr)
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, BreakerClosed, brk.States()[addr])
	}
	require.NoError(t, link.Heal())
	require.Eventually(t, func() bool { return brk.States()[hung.Addr] == BreakerClosed }, 5*time.Second, 10*time.Millisecond,
		"a probe closes it once the master answers")
}

// Redlock: a hung node's open breaker is a failed vote at once; the quorum of the others
// takes the lock, and the round sends no clean-up to the node that was refused.
func TestBreakerRedlockVote(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond})
	defer brk.Close()
	var nodes []redis.UniversalClient
	var srvs []*redistest.Server
	for i := 0; i < 3; i++ {
		srv := redistest.Start(t)
		rdb := redis.NewClient(srv.Options())
		defer rdb.Close()
		brk.Watch(srv.Addr(), rdb)
		nodes, srvs = append(nodes, rdb), append(srvs, srv)
	}
	r := NewRedlock(nodes, &Options{Lease: 10 * time.Second, CallTimeout: 200 * time.Millisecond, Breakers: brk})
	defer r.Close()
	ctx := ctxT(t, 20*time.Second)
	srvs[2].Pause()
	defer srvs[2].Resume()
	for i := 0; i < 5; i++ { // the hung node's calls time out in the background (late votes)
		l, err := r.Obtain(ctx, uniqueKey(t))
		require.NoError(t, err, "a quorum of 2 of 3")
		require.NoError(t, l.Release(ctx))
	}
	require.Eventually(t, func() bool { return brk.States()[srvs[2].Addr()] != BreakerClosed },
		time.Second, 5*time.Millisecond, "three timeouts in a row open it")
	var refused []string
	for i := 0; i < 5; i++ {
		key := uniqueKey(t)
		l, err := r.Obtain(ctx, key)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		refused = append(refused, key)
	}
	// Nothing of those rounds was sent to the hung node: once it answers, it has none of
	// their keys (a call sent while it hung would run now).
	srvs[2].Resume()
	require.Eventually(t, func() bool { return brk.States()[srvs[2].Addr()] == BreakerClosed }, 2*time.Second, 5*time.Millisecond)
	direct := srvs[2].Client(t)
	for _, key := range refused {
		k := KeysOf(DefaultKeyPrefix, key)
		n, err := direct.Exists(ctx, k.Hash, k.Fence).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s reached the hung node", key)
	}
}

// While a node's breaker is open, a clean-up (here a Release) is refused at once, as every
// call but the probe, and owed: the opening cut every connection to the node, and a clean-up
// sent on a new one would only wait out its handshake (a call timeout, with the holder's
// caller waiting) and never reach the node. The debt is paid when the breaker closes: the key
// is free then, not held by nobody until its lease ends.
func TestBreakerOpenRefusesCleanupsAndOwesThem(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	brk := NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond})
	defer brk.Close()
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	b := brk.Watch("node", rdb)
	c := New(rdb, &Options{CallTimeout: 100 * time.Millisecond, Breakers: brk})
	defer c.Close()
	other := newClient(t, srv, nil)
	ctx := ctxT(t, 20*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)

	resume := hangAndOpen(t, srv, c, b)
	assert.ErrorIs(t, l.Release(ctx), ErrBreakerOpen, "refused at once, not sent on a connection whose handshake hangs")
	resume()
	require.Eventually(t, func() bool { return b.State() == BreakerClosed }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		l2, err := other.TryObtain(ctx, key)
		if err != nil {
			return false
		}
		return l2.Release(ctx) == nil
	}, 5*time.Second, 10*time.Millisecond, "the owed release was paid when the breaker closed")
}

// hangAndOpen SIGSTOPs srv and opens b with three failed attempts of c (on a key of their
// own); the returned resume sends SIGCONT, once (and at the end of t, if not before).
func hangAndOpen(t *testing.T, srv *redistest.Server, c *Client, b *Breaker) (resume func()) {
	t.Helper()
	srv.Pause()
	var once sync.Once
	resume = func() { once.Do(srv.Resume) }
	t.Cleanup(resume)
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t) + "-open"
	for i := 0; i < 3; i++ {
		_, _ = c.TryObtain(ctx, key)
	}
	require.Equal(t, BreakerOpen, b.State())
	return resume
}
