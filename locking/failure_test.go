package locking

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

func TestWarnsWithoutContextTimeout(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	opts := shared.Options()
	opts.ContextTimeoutEnabled = false
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	New(rdb, &Options{Logger: log}).Close()
	assert.Contains(t, buf.String(), "ContextTimeoutEnabled")

	buf.Reset()
	New(newRedis(t, nil), &Options{Logger: log}).Close()
	assert.Empty(t, buf.String(), "no warning when it is on")
}

func TestRedisDownObtainFailsAtOnce(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	c := newClient(t, srv, &Options{Lease: time.Second})
	ctx := ctxT(t, 5*time.Second)
	srv.Stop()
	start := time.Now()
	_, err := c.Obtain(ctx, uniqueKey(t))
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotObtained), "a Redis failure, not a wait that ended: %v", err)
	assert.Less(t, time.Since(start), time.Second)
}

func TestRedisPausedCallsAreBounded(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	const lease = 2 * time.Second // CallTimeout 200ms
	c := newClient(t, srv, &Options{Lease: lease})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)

	srv.Pause()
	defer srv.Resume()
	bound := 2*c.callTimeout + 150*time.Millisecond // an attempt, then its best-effort clean-up

	start := time.Now()
	_, err = c.TryObtain(ctx, key+"-other")
	assert.Error(t, err)
	assert.Less(t, time.Since(start), bound, "TryObtain")

	start = time.Now()
	_, err = l.TTL(ctx)
	assert.Error(t, err)
	assert.Less(t, time.Since(start), bound, "TTL")

	start = time.Now()
	err = l.Release(ctx)
	assert.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotHeld), "a Redis failure: %v", err)
	assert.Less(t, time.Since(start), bound, "Release")
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld, "released locally all the same")
}
