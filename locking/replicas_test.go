package locking

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// Tests of Options.Replicas (replicas.go) against a real master and a real replica
// (redis-server --replicaof), the replica stopped with SIGSTOP where it must miss writes.

// replicated is a master with one replica, both stopped when the test ends.
type replicated struct {
	master  *redistest.Server
	replica *redisproc.Server
}

// startReplicated starts a master and one replica of it, and waits until the replica is in
// sync (state=online at the master).
func startReplicated(tb testing.TB) replicated {
	tb.Helper()
	master := redistest.Start(tb)
	rdb := master.Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The first sync at once, not after the default 5s delay of a diskless sync.
	require.NoError(tb, rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	path, err := exec.LookPath("redis-server")
	require.NoError(tb, err)
	host, port, _ := net.SplitHostPort(master.Addr())
	replica, err := redisproc.StartChildWith(path, 0, "", "--replicaof", host, port,
		"--repl-diskless-load", "on-empty-db")
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_ = replica.Signal(syscall.SIGCONT) // a stopped replica cannot be stopped gracefully
		replica.Close()
	})
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "state=online") {
			break
		}
		if ctx.Err() != nil {
			tb.Fatalf("the replica did not come in sync: %v\n%s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return replicated{master: master, replica: replica}
}

// replicaClient returns a client of the replica, closed when tb ends.
func (r replicated) replicaClient(tb testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: r.replica.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// stopReplica SIGSTOPs the replica until the test ends: it stays connected (the master still
// counts it as a replica) but acknowledges nothing from now on.
func (r replicated) stopReplica(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, r.replica.Signal(syscall.SIGSTOP))
	tb.Cleanup(func() { _ = r.replica.Signal(syscall.SIGCONT) })
}

// With the replica up, an acquisition returns only once the replica has the lock: the
// replica holds the lock hash and the fencing token the moment Obtain returns (core, fair
// and each key of ObtainMany).
func TestReplicasAcquiredLockIsOnTheReplica(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	verifyNoLeaks(t)
	r := startReplicated(t)
	c := newClient(t, r.master, &Options{Replicas: 1, Lease: 5 * time.Second})
	rep := r.replicaClient(t)
	ctx := ctxT(t, 20*time.Second)

	check := func(name string, token int64) {
		t.Helper()
		k := c.keysFor(name)
		n, err := rep.Exists(ctx, k.hash).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "the replica has the lock hash of %s", name)
		fence, err := rep.Get(ctx, k.fence).Int64()
		require.NoError(t, err)
		assert.Equal(t, token, fence, "the replica has the fencing token of %s", name)
	}
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	check(key, l.Token())
	require.NoError(t, l.Release(ctx))

	fair := uniqueKey(t)
	fl, err := c.ObtainFair(ctx, fair)
	require.NoError(t, err)
	check(fair, fl.Token())
	require.NoError(t, fl.Release(ctx))

	a, b := uniqueKey(t), uniqueKey(t)
	m, err := c.ObtainMany(ctx, []KeyFloor{{Key: a}, {Key: b}})
	require.NoError(t, err)
	check(a, m.Token(a))
	check(b, m.Token(b))
	require.NoError(t, m.Release(ctx))
}

// With the replica up, acknowledged renewals keep a lock (and a Multi) for two leases (six
// renewals; the lease is long enough for a loaded machine's WAIT to be retried in time).
func TestReplicasAcknowledgedRenewalsKeepTheLock(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	verifyNoLeaks(t)
	r := startReplicated(t)
	const lease = 3 * time.Second
	c := newClient(t, r.master, &Options{Replicas: 1, Lease: lease})
	ctx := ctxT(t, 20*time.Second)
	l, err := c.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	m, err := c.ObtainMany(ctx, []KeyFloor{{Key: uniqueKey(t)}, {Key: uniqueKey(t)}})
	require.NoError(t, err)
	select {
	case <-l.Done():
		t.Fatalf("lost: %v", l.Err())
	case <-m.Done():
		t.Fatalf("lost: %v", m.Err())
	case <-time.After(2 * lease):
	}
	require.NoError(t, l.Release(ctx))
	require.NoError(t, m.Release(ctx))
}

// With the replica stopped (connected, acknowledging nothing), every acquisition takes the
// key on the master, WAITs in vain, gives it back and tries again until its wait ends: the
// error is ErrNotReplicated (and ErrNotObtained), and no lock is left behind.
func TestReplicasStoppedReplicaRefusesTheLock(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	verifyNoLeaks(t)
	r := startReplicated(t)
	rdb := r.master.Client(t)
	c := New(rdb, &Options{Replicas: 1, Lease: 3 * time.Second, ReplicaTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	r.stopReplica(t)
	ctx := ctxT(t, 20*time.Second)

	absent := func(names ...string) {
		t.Helper()
		for _, name := range names {
			n, err := rdb.Exists(ctx, c.keysFor(name).hash).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "no lock hash of %s is left on the master", name)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		require.Error(t, err, what)
		assert.ErrorIs(t, err, ErrNotReplicated, what)
		assert.ErrorIs(t, err, ErrNotObtained, what)
	}

	key := uniqueKey(t)
	start := time.Now()
	_, err := c.Obtain(ctx, key, WithWait(400*time.Millisecond))
	refused("Obtain", err)
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "Obtain retried until its wait ended")
	_, err = c.TryObtain(ctx, key)
	refused("TryObtain", err)
	absent(key)

	fair := uniqueKey(t)
	_, err = c.ObtainFair(ctx, fair, WithWait(300*time.Millisecond))
	refused("ObtainFair", err)
	absent(fair)
	fk := c.keysFor(fair).fair()
	n, err := rdb.Exists(ctx, fk.queue, fk.timeouts).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the refused fair waiter left the queue")

	a, b := uniqueKey(t), uniqueKey(t)
	_, err = c.ObtainMany(ctx, []KeyFloor{{Key: a}, {Key: b}}, WithWait(300*time.Millisecond))
	refused("ObtainMany", err)
	absent(a, b)

	// The same Client without the option takes the lock at once: the refusal is the WAIT's.
	plain := New(rdb, &Options{Lease: 3 * time.Second})
	t.Cleanup(func() { _ = plain.Close() })
	l, err := plain.TryObtain(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// A master without any replica refuses every lock of a Client that asks for one, after the
// wait, and keeps none of them.
func TestReplicasNoReplicaRefusesTheLock(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	c := New(rdb, &Options{Replicas: 1, ReplicaTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	_, err := c.Obtain(ctx, key, WithWait(150*time.Millisecond))
	require.ErrorIs(t, err, ErrNotReplicated)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Contains(t, err.Error(), "0 of 1 replica(s)")
	n, err := rdb.Exists(ctx, c.keysFor(key).hash).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// A renewal no replica acknowledges is a failed renewal: with the replica stopped mid-hold,
// the watchdog declares the loss of a Lock and of a Multi before the lease it last had
// acknowledged can end, although the master renews the keys all along (a Client without the
// option keeps its lock).
func TestReplicasUnacknowledgedRenewalsLoseTheLock(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	verifyNoLeaks(t)
	r := startReplicated(t)
	// 300 ms calls and 200 ms WAITs (together within a third of the lease): with 100 ms and
	// 50 ms, a WAIT's reply came too late under stress-ng and the first Obtain failed.
	const lease = 2 * time.Second
	c := newClient(t, r.master, &Options{Replicas: 1, Lease: lease, CallTimeout: 300 * time.Millisecond,
		ReplicaTimeout: 200 * time.Millisecond})
	plain := newClient(t, r.master, &Options{Lease: lease, CallTimeout: 300 * time.Millisecond})
	ctx := ctxT(t, 20*time.Second)
	l, err := c.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	p, err := plain.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	m, err := c.ObtainMany(ctx, []KeyFloor{{Key: uniqueKey(t)}, {Key: uniqueKey(t)}})
	require.NoError(t, err)
	r.stopReplica(t)
	for _, done := range []<-chan struct{}{l.Done(), m.Done()} {
		select {
		case <-done:
		case <-time.After(3 * lease):
			t.Fatal("a lock outlived three leases of unacknowledged renewals")
		}
	}
	assert.ErrorIs(t, l.Err(), ErrLost)
	assert.ErrorIs(t, m.Err(), ErrLost, "the Multi's renewals (one pipeline and one WAIT per node) too")
	assert.ErrorIs(t, m.Release(ctx), ErrNotHeld)
	// The replica's copy of the lease ends one lease after the last acknowledged renewal ran.
	lastAcked := time.Unix(0, l.h.wd.lastSent.Load())
	t.Logf("loss declared %s before the acknowledged lease ended", lastAcked.Add(lease).Sub(time.Now()))
	assert.NoError(t, p.Err(), "without the option the renewals go on")
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)
	require.NoError(t, p.Release(ctx))
}

// The option needs WAIT to reach the node that took the key: a Ring, and a Redlock of
// independent masters, refuse it before any Redis call.
func TestReplicasRefusedWhereMeaningless(t *testing.T) {
	verifyNoLeaks(t)
	ctx := ctxT(t, 5*time.Second)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": shared.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	c := New(ring, &Options{Replicas: 1})
	t.Cleanup(func() { _ = c.Close() })
	_, err := c.Obtain(ctx, uniqueKey(t))
	assert.ErrorIs(t, err, ErrReplicasUnsupported)
	_, err = c.ObtainFair(ctx, uniqueKey(t))
	assert.ErrorIs(t, err, ErrReplicasUnsupported)
	_, err = c.ObtainMany(ctx, []KeyFloor{{Key: uniqueKey(t)}})
	assert.ErrorIs(t, err, ErrReplicasUnsupported)

	rl := NewRedlock([]redis.UniversalClient{newRedis(t, nil)}, &Options{Replicas: 1})
	t.Cleanup(func() { _ = rl.Close() })
	_, err = rl.Obtain(ctx, uniqueKey(t))
	assert.ErrorIs(t, err, ErrReplicasUnsupported)
	assert.False(t, errors.Is(err, ErrNotObtained), "a refusal, not a wait that ended")
}

// On a Cluster, WAIT goes to the master of each key's slot: the cluster of the tests has no
// replicas, so every key of an ObtainMany spread over the three masters is refused and given
// back.
func TestReplicasClusterWaitsOnEachMaster(t *testing.T) {
	verifyNoLeaks(t)
	cl := redistest.StartCluster(t)
	rdb := redistest.ClusterClient(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := New(rdb, &Options{KeyPrefix: "p:", Replicas: 1, ReplicaTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	keys := keysOnMasters(t, rdb, "p:", 3)
	kfs := make([]KeyFloor, len(keys))
	for i, k := range keys {
		kfs[i] = KeyFloor{Key: k}
	}
	_, err := c.TryObtainMany(ctx, kfs)
	require.ErrorIs(t, err, ErrNotReplicated)
	for _, k := range keys {
		n, err := rdb.Exists(ctx, c.keysFor(k).hash).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "key %s given back", k)
	}
}

// BenchmarkObtainReplicas is one uncontended Obtain+Release on a master with one replica,
// without the option and with Replicas 1, in the same run (alternated, so that both meet the
// same machine): the cost of the WAIT per acquisition. It reports both and their ratio.
func BenchmarkObtainReplicas(b *testing.B) {
	r := startReplicated(b)
	ctx := context.Background()
	plain := newClient(b, r.master, nil)
	acked := newClient(b, r.master, &Options{Replicas: 1})
	key := uniqueKey(b)
	var took [2]time.Duration
	for b.Loop() {
		for i, c := range []*Client{plain, acked} {
			start := time.Now()
			l, err := c.Obtain(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Microseconds())/n, "us/obtain-replicas0")
	b.ReportMetric(float64(took[1].Microseconds())/n, "us/obtain-replicas1")
	b.ReportMetric(float64(took[1])/float64(took[0]), "ratio")
}

// The failover the option is for, on a real Sentinel set: a lock the replica acknowledged is
// on the promoted replica after the master dies, so nobody else gets it until its holder
// releases it; while the replica is cut off, no other lock is granted at all. A Client without
// the option takes a lock on the master alone meanwhile, and the promoted replica grants it
// again.
func TestReplicasSentinelFailoverKeepsTheLock(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	set := redistest.StartSentinel(t)
	rdb := redistest.FailoverClient(t, set)
	opts := &Options{KeyPrefix: "snr:", Lease: 20 * time.Second, CallTimeout: 500 * time.Millisecond,
		ReplicaTimeout: 100 * time.Millisecond}
	c := New(rdb, &Options{KeyPrefix: opts.KeyPrefix, Lease: opts.Lease, CallTimeout: opts.CallTimeout,
		ReplicaTimeout: opts.ReplicaTimeout, Replicas: 1})
	defer c.Close()
	other := New(rdb, opts) // another process, without the option: it only needs the lock free
	defer other.Close()
	ctx := ctxT(t, 60*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)

	replica := set.Replicas[0]
	require.NoError(t, replica.Signal(syscall.SIGSTOP))
	defer func() { _ = replica.Signal(syscall.SIGCONT) }()
	require.NoError(t, rdb.ClientKillByFilter(ctx, "TYPE", "replica").Err())
	_, err = c.TryObtain(ctx, uniqueKey(t))
	require.ErrorIs(t, err, ErrNotReplicated, "the cut-off replica acknowledges nothing: no lock is granted")
	unacked := uniqueKey(t) // what the option prevents: a lock on the master only
	first, err := other.TryObtain(ctx, unacked)
	require.NoError(t, err)

	require.NoError(t, set.Master.Signal(syscall.SIGKILL))
	require.NoError(t, replica.Signal(syscall.SIGCONT))
	require.Eventually(t, func() bool {
		addr, err := set.MasterAddr(ctx)
		return err == nil && addr == replica.Addr
	}, 30*time.Second, 50*time.Millisecond, "the Sentinels promote the replica")
	var rerr error
	require.Eventually(t, func() bool { // the failover client reaches the new master
		octx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, rerr = other.TryObtain(octx, key)
		return errors.Is(rerr, ErrNotObtained)
	}, 20*time.Second, 50*time.Millisecond, "the promoted replica has the lock: nobody else gets it (last: %v)", rerr)
	assert.NoError(t, l.Err(), "the holder still holds it")
	second, err := other.TryObtain(ctx, unacked)
	require.NoError(t, err, "without the option, the promoted replica grants the lock it missed a second time")
	_ = second.Release(ctx)
	_ = first.Release(ctx)
	require.NoError(t, l.Release(ctx), "released on the promoted replica, where its hash is")
	l2, err := other.TryObtain(ctx, key)
	require.NoError(t, err)
	assert.Greater(t, l2.Token(), l.Token(), "the promoted replica has the holder's fencing token too")
	require.NoError(t, l2.Release(ctx))
}
