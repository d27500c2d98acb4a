package locking

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// Tests of the lock over the two Redis deployments besides one server: a real three-master
// Cluster and a real Sentinel set (internal/redisproc starts both).

// keysOnMasters returns one key per master of the cluster: keys whose slots live on
// different nodes.
func keysOnMasters(t *testing.T, rdb *redis.ClusterClient, prefix string, masters int) []string {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	seen := map[string]bool{}
	var keys []string
	for i := 0; len(keys) < masters && i < 1000; i++ {
		key := fmt.Sprintf("%s-%d", t.Name(), i)
		node, err := rdb.MasterForKey(ctx, KeysOf(prefix, key).Hash)
		require.NoError(t, err)
		if addr := node.Options().Addr; !seen[addr] {
			seen[addr] = true
			keys = append(keys, key)
		}
	}
	require.Len(t, keys, masters, "keys on every master")
	return keys
}

// Every Redis key of one lock (hash, fence, channel, fair queue, semaphore sets) hashes to
// one slot: a script touching them runs on one node, as Cluster requires.
func TestClusterKeysShareOneSlot(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := redistest.ClusterClient(t, cl)
	ctx := ctxT(t, 10*time.Second)
	c := New(rdb, &Options{KeyPrefix: "p:"})
	defer c.Close()
	s := NewSemaphore(rdb, 2, &Options{KeyPrefix: "p:"})
	defer s.Close()
	for _, key := range keysOnMasters(t, rdb, "p:", 3) {
		k := c.keysFor(key)
		sk := s.keysFor(key)
		fk := k.fair()
		names := []string{k.hash, k.fence, k.channel, fk.queue, fk.timeouts, fk.turn + "owner", sk.hash, sk.fence, sk.hash + ":counter"}
		want, err := rdb.ClusterKeySlot(ctx, names[0]).Result()
		require.NoError(t, err)
		for _, n := range names[1:] {
			got, err := rdb.ClusterKeySlot(ctx, n).Result()
			require.NoError(t, err)
			assert.Equal(t, want, got, "%s and %s", names[0], n)
		}
	}
}

// Locks on keys of all three masters, from two clients (two connection pools, as two
// processes), under many goroutines: one holder at a time per key, fencing tokens strictly
// increasing per key, and every waiter woken by a release message (classic PUBLISH reaches a
// subscriber connected to any node) rather than by its lease timer.
func TestClusterLockExclusionAndWakeUp(t *testing.T) {
	verifyNoLeaks(t)
	cl := redistest.StartCluster(t)
	const prefix = "cl:"
	keys := keysOnMasters(t, redistest.ClusterClient(t, cl), prefix, 3)
	opts := &Options{KeyPrefix: prefix, Lease: 10 * time.Second, Wait: 20 * time.Second}
	clients := []*Client{New(redistest.ClusterClient(t, cl), opts), New(redistest.ClusterClient(t, cl), opts)}
	for _, c := range clients {
		t.Cleanup(func() { _ = c.Close() })
	}
	ctx := ctxT(t, 60*time.Second)

	const goroutines, rounds = 12, 8
	var mu sync.Mutex
	holders := map[string]int{}
	tokens := map[string][]int64{}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for r := 0; r < rounds; r++ {
				key := keys[(g+r)%len(keys)]
				l, err := c.Obtain(ctx, key)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				holders[key]++
				assert.Equal(t, 1, holders[key], "one holder of %s", key)
				tokens[key] = append(tokens[key], l.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holders[key]--
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	total := 0
	for key, ts := range tokens {
		total += len(ts)
		for i := 1; i < len(ts); i++ {
			assert.Greater(t, ts[i], ts[i-1], "tokens of %s in order of holding", key)
		}
	}
	assert.Equal(t, goroutines*rounds, total)
	var byMessage, byTimer int64
	for _, c := range clients {
		byMessage += c.notify.wokenByMessage.Load()
		byTimer += c.notify.wokenByTimer.Load()
	}
	t.Logf("wake-ups: %d by message, %d by timer", byMessage, byTimer)
	assert.Positive(t, byMessage, "waiters woken by release messages")
	assert.Zero(t, byTimer, "no waiter fell back to its 10s lease timer")
}

// Through Sentinel: a lock taken on the master survives nothing of a failover it was not
// replicated for, but the client follows the promotion: after the master dies, the lock
// works on the promoted replica, and the floor keeps new tokens above those the caller has
// seen (what lock+guard passes from the database).
func TestSentinelLockAcrossFailover(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	set := redistest.StartSentinel(t)
	rdb := redistest.FailoverClient(t, set)
	c := New(rdb, &Options{KeyPrefix: "sn:", Lease: time.Second, Wait: 5 * time.Second})
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	// The failover client finds the master through the sentinels on its first call: on a loaded
	// machine that can take longer than one call timeout (a run of make test failed its first
	// Obtain so), so the test waits until the client reaches the master before it begins.
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return rdb.Ping(pctx).Err() == nil
	}, 20*time.Second, 10*time.Millisecond, "the failover client reaches the master")
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	first := l.Token()
	require.NoError(t, l.Release(ctx))
	// Wait until the replica has the counter, then cut it off and take one more token that
	// it never sees.
	replica := redis.NewClient(&redis.Options{Addr: set.Replicas[0].Addr, MaxRetries: -1})
	defer replica.Close()
	require.Eventually(t, func() bool {
		v, err := replica.Get(ctx, KeysOf("sn:", key).Fence).Int64()
		return err == nil && v == first
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, set.Replicas[0].Signal(syscall.SIGSTOP))
	require.NoError(t, rdb.ClientKillByFilter(ctx, "TYPE", "replica").Err())
	l, err = c.Obtain(ctx, key)
	require.NoError(t, err)
	unseen := l.Token()
	require.Equal(t, first+1, unseen)
	require.NoError(t, set.Master.Signal(syscall.SIGKILL))
	require.NoError(t, set.Replicas[0].Signal(syscall.SIGCONT))
	select {
	case <-l.Done(): // the watchdog finds the lock gone on the promoted replica
	case <-ctx.Done():
		t.Fatal("the lost lock was not noticed")
	}
	assert.ErrorIs(t, l.Err(), ErrLost)

	var l2 *Lock
	require.Eventually(t, func() bool {
		octx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l2, err = c.Obtain(octx, key, WithFloor(unseen))
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the lock works again after the promotion")
	defer l2.Release(ctx)
	assert.Greater(t, l2.Token(), unseen, "the floor keeps the token above the one the promoted replica never saw")
	assert.Eventually(t, func() bool { // every Sentinel learns the new configuration, in time
		addr, err := set.MasterAddr(ctx)
		return err == nil && addr == set.Replicas[0].Addr
	}, 10*time.Second, 20*time.Millisecond, "the Sentinels name the promoted replica")
}
