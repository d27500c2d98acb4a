package netfault_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/internal/netfault"
	"github.com/stockguard/stockguard/internal/redistest"
)

func ping(rdb *redis.Client, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// A real redis-server behind a Link: traffic flows; a blackhole makes calls time out (on the
// open connection and on new ones) without refusing anything; latency delays each round trip
// by at least twice the delay; Heal restores the link.
func TestLinkToRedis(t *testing.T) {
	srv := redistest.Start(t)
	l, err := netfault.NewLink(srv.Addr())
	require.NoError(t, err)
	defer l.Close()
	o := srv.Options()
	o.Addr = l.Addr
	rdb := redis.NewClient(o)
	defer rdb.Close()
	require.NoError(t, ping(rdb, 2*time.Second))

	require.NoError(t, l.Blackhole())
	err = ping(rdb, 300*time.Millisecond)
	assert.True(t, isTimeout(err), "a black-holed call times out: %v", err)
	fresh := redis.NewClient(o)
	err = ping(fresh, 300*time.Millisecond)
	assert.True(t, isTimeout(err), "a new connection is black-holed too: %v", err)
	_ = fresh.Close()

	require.NoError(t, l.Heal())
	require.Eventually(t, func() bool { return ping(rdb, time.Second) == nil }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, l.Latency(30*time.Millisecond))
	start := time.Now()
	require.NoError(t, ping(rdb, 2*time.Second))
	assert.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond, "30ms each way")
	require.NoError(t, l.Heal())
	require.NoError(t, ping(rdb, 2*time.Second))
	l.Close()
	assert.Error(t, l.Blackhole(), "a closed link takes no toxic")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection)"))
}
