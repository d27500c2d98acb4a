package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClockStepExpiresKeysEarly starts a redis-server with the clock shim and steps its clock:
// a key's PTTL drops by the step at once, and a step past its TTL expires it.
func TestClockStepExpiresKeysEarly(t *testing.T) {
	testkit.NeedClock(t)
	ctx := context.Background()
	dir := t.TempDir()
	clock, env, err := prepareClock(ctx, dir)
	require.NoError(t, err)
	srv, err := startRedis("", env...)
	require.NoError(t, err)
	defer srv.Close()
	rdb := srv.Client()
	defer rdb.Close()

	require.NoError(t, rdb.Set(ctx, "lease", "me", 10*time.Second).Err())
	before, err := rdb.PTTL(ctx, "lease").Result()
	require.NoError(t, err)
	assert.Greater(t, before, 9*time.Second)

	offset, err := clock.Jump(4 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 4*time.Second, offset)
	after, err := rdb.PTTL(ctx, "lease").Result()
	require.NoError(t, err)
	assert.Less(t, after, 6100*time.Millisecond, "4s of the TTL gone at once")
	assert.Greater(t, after, 4*time.Second)

	offset, err = clock.Jump(7 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 11*time.Second, offset)
	n, err := rdb.Exists(ctx, "lease").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a step past the TTL expires the key")
	assert.Equal(t, time.Duration(-2), mustPTTL(t, rdb, "lease"), "PTTL -2: no such key")
}

func mustPTTL(t *testing.T, rdb *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	return d
}
