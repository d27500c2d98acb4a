package locking

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// retryScripts makes go-redis send the next script call twice, as its own retry does
// (MaxRetries) when the first reply is lost after the script ran.
type retryScripts struct{ armed atomic.Bool }

func (h *retryScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *retryScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || (cmd.Name() != "evalsha" && cmd.Name() != "eval") || !h.armed.CompareAndSwap(true, false) {
			return err
		}
		return next(ctx, cmd) // the first reply was "lost": the retry runs the script again
	}
}

func (h *retryScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestAcquireRetriedByTheClientIsItsOwnLock(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	retry := &retryScripts{}
	rdb.AddHook(retry)
	c := New(rdb, &Options{Lease: 3 * time.Second})
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx := ctxT(t, 10*time.Second)
	for name, obtain := range map[string]func(context.Context, string, ...ObtainOption) (*Lock, error){
		"core": c.TryObtain, "fair": c.TryObtainFair,
	} {
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			k := c.keysFor(key)
			require.NoError(t, rdb.Set(ctx, k.fence, 41, 0).Err())
			retry.armed.Store(true)
			l, err := obtain(ctx, key)
			require.NoError(t, err, "the retry finds the lock its first run took: its own")
			assert.False(t, retry.armed.Load(), "the script ran twice")
			assert.Equal(t, int64(42), l.Token(), "the token the first run issued")
			fence, err := rdb.Get(ctx, k.fence).Int64()
			require.NoError(t, err)
			assert.Equal(t, int64(42), fence, "one token issued")
			count, err := rdb.HGet(ctx, k.hash, l.h.owner).Int()
			require.NoError(t, err)
			assert.Equal(t, 1, count, "one hold")
			require.NoError(t, l.Release(ctx))
			n, err := rdb.Exists(ctx, k.hash).Result()
			require.NoError(t, err)
			assert.Zero(t, n)
		})
	}
}

func TestAcquireWithConnectionLostAfterSendingCleansUp(t *testing.T) {
	verifyNoLeaks(t)
	for _, lost := range []error{
		io.EOF,
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
	} {
		t.Run(fmt.Sprint(lost), func(t *testing.T) {
			rdb := &lostReplies{Client: newRedis(t, nil), errReply: lost}
			c := New(rdb, nil)
			defer c.Close()
			ctx := ctxT(t, 5*time.Second)
			key := uniqueKey(t)
			rdb.armed.Store(true)
			_, err := c.TryObtain(ctx, key)
			require.Error(t, err)
			assert.False(t, errors.Is(err, ErrNotObtained), "a Redis failure: %v", err)
			n, err := rdb.Exists(ctx, c.keysFor(key).hash).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "the lock the lost call took is deleted, not left for a lease")
		})
	}
}

func TestMaybeExecuted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{context.Canceled, true},
		{io.EOF, true},
		{fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{redis.Nil, false},
		{errors.New("ERR something"), false},
		{nil, false},
	} {
		assert.Equal(t, tc.want, maybeExecuted(tc.err), "%v", tc.err)
	}
	// A Redis error reply answers the call.
	err := shared.Client(t).Do(context.Background(), "NOSUCHCOMMAND").Err()
	require.Error(t, err)
	assert.False(t, maybeExecuted(err), "%v", err)
}
