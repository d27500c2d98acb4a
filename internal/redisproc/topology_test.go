package redisproc_test

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/internal/testutil"
)

func redisServerPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: apt-get install -y redis-server")
	}
	return path
}

// Three masters share the 16384 slots: keys land on different nodes, and the go-redis cluster
// client built from URL() reaches all of them.
func TestStartCluster(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	c, err := redisproc.StartCluster(redisServerPath(t), 3)
	require.NoError(t, err)
	defer c.Close()
	opts, err := redis.ParseClusterURL(c.URL())
	require.NoError(t, err)
	assert.ElementsMatch(t, c.Addrs(), opts.Addrs)
	rdb := redis.NewClusterClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owners := map[string]bool{}
	for i := 0; i < 30; i++ {
		key := fmt.Sprintf("k%d", i)
		require.NoError(t, rdb.Set(ctx, key, i, 0).Err())
		node, err := rdb.MasterForKey(ctx, key)
		require.NoError(t, err)
		owners[node.Options().Addr] = true
	}
	assert.Len(t, owners, 3, "30 keys should spread over the three masters")
	assert.Error(t, redisproc.ErrOf(redisproc.StartCluster(redisServerPath(t), 2)), "two masters are refused")
}

// The Sentinels know the master and promote the replica when the master dies.
//
// down-after is 2s here, not the default 500ms: on a busy 2-core machine a Sentinel that has
// just switched to the promoted replica can go 500ms without its PING reply, and since the
// other Sentinels' "master down" answers about the old master still count for 5s, it fails
// over again at once, promoting the old master as it rejoins (seen in the Sentinels' logs).
// Rejoin follows such a second failover, but this test checks the roles of the first one.
func TestStartSentinelSetFailover(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	s, err := redisproc.StartSentinelSet(redisServerPath(t), redisproc.SentinelConfig{DownAfter: 2 * time.Second})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	require.NoError(t, err)
	assert.Equal(t, s.Master.Addr, addr)

	opts, err := redis.ParseFailoverURL(s.URL())
	require.NoError(t, err)
	assert.Equal(t, "stockguard", opts.MasterName)
	assert.ElementsMatch(t, s.SentinelAddrs(), opts.SentinelAddrs)

	require.NoError(t, s.Master.Signal(syscall.SIGKILL))
	for {
		addr, err = s.MasterAddr(ctx)
		if err == nil && addr == s.Replicas[0].Addr {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica %s was not promoted: the sentinels name %q (%v)", s.Replicas[0].Addr, addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// The dead master comes back as a replica of the promoted one: the set can fail over again.
	old := s.Master.Addr
	began := time.Now()
	require.NoError(t, s.Rejoin(ctx))
	t.Logf("rejoined in %v", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, addr, s.Master.Addr, "the sentinels name the promoted replica still")
	require.Len(t, s.Replicas, 1)
	assert.Equal(t, old, s.Replicas[0].Addr)
	assert.False(t, s.Replicas[0].Exited())
}

// Rejoin follows the Sentinels: after a failover that killed nobody (SENTINEL FAILOVER swaps
// the roles), it restarts nothing and reports the roles as the Sentinels now see them.
func TestSentinelSetRejoinFollowsAnotherFailover(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	s, err := redisproc.StartSentinelSet(redisServerPath(t), redisproc.SentinelConfig{DownAfter: 2 * time.Second})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	master, replica := s.Master, s.Replicas[0]
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr})
	defer sc.Close()
	require.NoError(t, sc.Failover(ctx, s.MasterName).Err())
	for { // the failover runs after the reply
		if addr, err := s.MasterAddr(ctx); err == nil && addr == replica.Addr {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the sentinels never named the replica")
		case <-time.After(20 * time.Millisecond):
		}
	}

	require.NoError(t, s.Rejoin(ctx))
	assert.Same(t, replica, s.Master, "the replica was promoted")
	require.Len(t, s.Replicas, 1)
	assert.Same(t, master, s.Replicas[0], "the old master is its replica, the same process")
	addr, err := s.MasterAddr(ctx)
	require.NoError(t, err)
	assert.Equal(t, replica.Addr, addr)
}
