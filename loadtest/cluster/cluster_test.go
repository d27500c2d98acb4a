package cluster

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRestartInstanceSamePort: an instance killed and started again keeps its URL (the same
// port, the same flags), gets a new process, answers, and the old process is gone.
func TestRestartInstanceSamePort(t *testing.T) {
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cl, err := Start(ctx, Config{Bin: testkit.Storefront, Instances: 1})
	require.NoError(t, err)
	defer cl.Close()
	old := cl.Instances[0]
	in, err := cl.RestartInstance(ctx, 0, 100*time.Millisecond)
	require.NoError(t, err)
	assert.Same(t, in, cl.Instances[0])
	assert.Equal(t, old.URL, in.URL, "same port")
	assert.NotEqual(t, old.PID(), in.PID())
	want := slices.Clone(old.args)
	want[slices.Index(want, "--addr")+1] = strings.TrimPrefix(old.URL, "http://")
	assert.Equal(t, want, in.args, "same flags, the address pinned to the port it had")
	select {
	case <-old.done:
	default:
		t.Fatal("the killed process is not reaped")
	}
	a := &client.API{Base: in.URL, HC: client.NewHTTPClient(1, time.Second)}
	defer a.HC.CloseIdleConnections()
	require.NoError(t, a.Ready(ctx))
}

// TestRedisRestartEmptyAndFromSnapshot: a restart from the snapshot brings back what the last
// SAVE held and nothing written after it; an empty restart deletes the snapshot first.
func TestRedisRestartEmptyAndFromSnapshot(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("needs redis-server on PATH")
	}
	ctx := context.Background()
	srv, err := startRedis(t.TempDir())
	require.NoError(t, err)
	defer srv.Close()
	rdb := srv.Client()
	defer rdb.Close()
	require.NoError(t, rdb.Set(ctx, "saved", "1", 0).Err())
	require.NoError(t, rdb.Save(ctx).Err())
	require.NoError(t, rdb.Set(ctx, "after", "1", 0).Err())
	pid := srv.PID
	require.NoError(t, srv.RestartFromSnapshot())
	assert.NotEqual(t, pid, srv.PID)
	n, err := rdb.Exists(ctx, "saved", "after").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the snapshot's key only")
	assert.Equal(t, int64(1), mustExists(t, rdb, "saved"))

	require.NoError(t, srv.RestartEmpty())
	assert.Zero(t, mustExists(t, rdb, "saved"))
	assert.NoFileExists(t, filepath.Join(srv.opts.Dir, "dump.rdb"))
	require.NoError(t, srv.RestartFromSnapshot())
	assert.Zero(t, mustExists(t, rdb, "saved"), "no snapshot left to load")
}

func mustExists(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	var n int64
	var err error
	for try := 0; try < 2; try++ { // the first call may meet a connection to the killed server
		if n, err = rdb.Exists(context.Background(), key).Result(); err == nil {
			return n
		}
	}
	require.NoError(t, err)
	return n
}
