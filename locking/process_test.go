package locking

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/testutil"
)

// The child mode of the test binary: TestMutualExclusion4Processes re-executes it with these
// variables set, and each child runs childMain instead of the tests.
const (
	childEnv      = "LOCKING_TEST_CHILD_REDIS" // the Redis address
	childKeyEnv   = "LOCKING_TEST_CHILD_KEY"
	childRounds   = 25
	childCounter  = ":counter"
	childInsideOf = ":inside"
)

func TestMutualExclusion4Processes(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess) // spawns processes
	exe, err := os.Executable()
	require.NoError(t, err)
	key := uniqueKey(t)
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+shared.Addr(), childKeyEnv+"="+key)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		assert.NoError(t, cmd.Wait(), "child %d", i)
	}
	rdb := newRedis(t, nil)
	n, err := rdb.Get(context.Background(), key+childCounter).Int()
	require.NoError(t, err)
	assert.Equal(t, procs*childRounds, n, "read-modify-write under the lock lost no update")
}

// childMain increments a counter in Redis read-modify-write under the lock, checking that no
// other holder is inside. It returns the exit code.
func childMain() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childEnv), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := New(rdb, &Options{Lease: 5 * time.Second})
	defer c.Close()
	key := os.Getenv(childKeyEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range childRounds {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child obtain:", err)
			return 1
		}
		if ok, err := rdb.SetNX(ctx, key+childInsideOf, os.Getpid(), 0).Result(); err != nil || !ok {
			fmt.Fprintln(os.Stderr, "child: another holder is inside", err)
			return 2
		}
		v, err := rdb.Get(ctx, key+childCounter).Result()
		if err != nil && err != redis.Nil {
			return 3
		}
		n, _ := strconv.Atoi(v)
		time.Sleep(time.Millisecond)
		if err := rdb.Set(ctx, key+childCounter, n+1, 0).Err(); err != nil {
			return 3
		}
		if err := rdb.Del(ctx, key+childInsideOf).Err(); err != nil {
			return 3
		}
		if err := l.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "child release:", err)
			return 4
		}
	}
	return 0
}
