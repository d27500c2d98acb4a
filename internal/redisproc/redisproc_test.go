package redisproc_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redisproc"
)

// Both kinds serve Redis on loopback, expire keys in real time, and leave nothing behind.
func TestKinds(t *testing.T) {
	start := map[string]func() (*redisproc.Server, error){
		redisproc.KindMemory: redisproc.StartMemory,
		redisproc.KindChild: func() (*redisproc.Server, error) {
			path, err := exec.LookPath("redis-server")
			if err != nil {
				t.Fatal("redis-server not on PATH: apt-get install -y redis-server")
			}
			return redisproc.StartChild(path, 0)
		},
	}
	for kind, startFn := range start {
		t.Run(kind, func(t *testing.T) {
			srv, err := startFn()
			require.NoError(t, err)
			assert.Equal(t, kind, srv.Kind)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			defer rdb.Close()
			ctx := context.Background()

			require.NoError(t, rdb.Set(ctx, "k", "v", 100*time.Millisecond).Err())
			require.Eventually(t, func() bool { return rdb.Exists(ctx, "k").Val() == 0 },
				5*time.Second, 10*time.Millisecond, "the TTL runs out in real time")

			srv.Close()
			srv.Close() // idempotent
			assert.Error(t, rdb.Ping(ctx).Err(), "stopped")
			if srv.PID != 0 {
				assert.ErrorIs(t, syscall.Kill(srv.PID, 0), syscall.ESRCH, "the child is gone")
			}
		})
	}
}

// A port that is taken is reported, even though the server already there answers.
func TestStartChildPortTaken(t *testing.T) {
	path, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server not on PATH: apt-get install -y redis-server")
	first, err := redisproc.StartChild(path, 0)
	require.NoError(t, err)
	defer first.Close()
	_, portStr, err := net.SplitHostPort(first.Addr)
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	_, err = redisproc.StartChild(path, port)
	assert.ErrorContains(t, err, "redis-server on "+first.Addr, "the first server's answer is not taken for the new one's")
}
