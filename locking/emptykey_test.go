package locking

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// countCommands counts the commands a go-redis client sends.
type countCommands struct{ n atomic.Int64 }

func (h *countCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func TestEmptyKeyIsRefusedBeforeAnyRedisCall(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	counter := &countCommands{}
	rdb.AddHook(counter)
	c := New(rdb, nil)
	t.Cleanup(func() { _ = c.Close() })
	r := newRedlock(t, []*redis.Client{rdb}, nil)
	s := NewSemaphore(rdb, 2, nil)
	t.Cleanup(func() { _ = s.Close() })
	ctx := ctxT(t, 5*time.Second)
	for name, obtain := range map[string]func(context.Context, string, ...ObtainOption) (*Lock, error){
		"Obtain": c.Obtain, "TryObtain": c.TryObtain, "ObtainFair": c.ObtainFair, "TryObtainFair": c.TryObtainFair,
		"Redlock.Obtain": r.Obtain, "Redlock.TryObtain": r.TryObtain, "Semaphore.Acquire": s.Acquire,
		"Semaphore.TryAcquire": func(ctx context.Context, key string, _ ...ObtainOption) (*Lock, error) {
			return s.TryAcquire(ctx, key)
		},
	} {
		l, err := obtain(ctx, "")
		assert.ErrorIs(t, err, ErrEmptyKey, name)
		assert.Nil(t, l, name)
	}
	assert.Zero(t, counter.n.Load(), "no Redis call")
}
