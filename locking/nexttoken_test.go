package locking

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// A holder that writes several times under one hold draws a new token for each write: every
// token is greater than the ones before, on every handle, and the next holder's is greater
// still. Concurrent draws never repeat a token.
func TestNextTokenDuringAHold(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, srv, nil)
	key := uniqueKey(t)

	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	first := l.Token()
	inner, err := c.Obtain(l.Context(ctx), key) // re-entered: one hold, two handles
	require.NoError(t, err)

	var mu sync.Mutex
	seen := map[int64]bool{first: true}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				tok, err := l.NextToken(ctx)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				assert.False(t, seen[tok], "token %d issued twice", tok)
				seen[tok] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, 1+8*25)
	last := first
	for tok := range seen {
		last = max(last, tok)
	}
	assert.Equal(t, last, l.Token(), "Token returns the greatest drawn")
	assert.Equal(t, last, inner.Token(), "every handle of the hold sees it")
	require.NoError(t, l.Err(), "the lock is still held")

	require.NoError(t, inner.Release(ctx))
	require.NoError(t, l.Release(ctx))
	_, err = l.NextToken(ctx)
	assert.ErrorIs(t, err, ErrNotHeld, "after release")

	next, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Greater(t, next.Token(), last, "the next holder's token is greater than every drawn one")
	require.NoError(t, next.Release(ctx))
}

// A draw that finds the lock gone issues nothing and declares the loss: Done closes and the
// lock's contexts end, before any watchdog renewal.
func TestNextTokenFindsTheLockLost(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, srv, &Options{Lease: 30 * time.Second})
	key := uniqueKey(t)
	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	work := l.Context(ctx)

	k := c.keysFor(key)
	before, err := c.rdb.Get(ctx, k.fence).Int64()
	require.NoError(t, err)
	require.NoError(t, c.rdb.Del(ctx, k.hash).Err()) // the key expired early (a clock jump) or was flushed

	_, err = l.NextToken(ctx)
	require.ErrorIs(t, err, ErrLost)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done still open after the loss was found")
	}
	assert.ErrorIs(t, context.Cause(work), ErrLost)
	after, err := c.rdb.Get(ctx, k.fence).Int64()
	require.NoError(t, err)
	assert.Equal(t, before, after, "no token issued to a holder that lost the lock")
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)
}

// Kinds whose token is not one counter's draw none.
func TestNextTokenOtherKinds(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)

	r := newRedlock(t, []*redis.Client{newRedis(t, srv)}, nil)
	rl, err := r.Obtain(ctx, key)
	require.NoError(t, err)
	_, err = rl.NextToken(ctx)
	assert.ErrorIs(t, err, ErrNoNextToken)
	require.NoError(t, rl.Release(ctx))

	sem := NewSemaphore(newRedis(t, srv), 2, nil)
	t.Cleanup(func() { _ = sem.Close() })
	p, err := sem.Acquire(ctx, key+":sem")
	require.NoError(t, err)
	_, err = p.NextToken(ctx)
	assert.ErrorIs(t, err, ErrNoNextToken)
	require.NoError(t, p.Release(ctx))
}

// The fair lock is the core lock's hash and counter with a queue beside it: it draws tokens as
// the core lock does, greater than the last, and the next holder's greater still; a draw by a
// holder that lost the key issues nothing.
func TestNextTokenFairLock(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, srv, nil)
	key := uniqueKey(t)
	fl, err := c.ObtainFair(ctx, key)
	require.NoError(t, err)
	first := fl.Token()
	next, err := fl.NextToken(ctx)
	require.NoError(t, err)
	assert.Greater(t, next, first)
	assert.Equal(t, next, fl.Token())
	require.NoError(t, fl.Release(ctx))

	core, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Greater(t, core.Token(), next, "the core lock's next holder continues the same counter")
	require.NoError(t, newRedis(t, srv).Del(ctx, c.RedisKey(key)).Err()) // the key is gone
	_, err = core.NextToken(ctx)
	assert.ErrorIs(t, err, ErrLost)

	fl, err = c.ObtainFair(ctx, key)
	require.NoError(t, err)
	require.NoError(t, newRedis(t, srv).Del(ctx, c.RedisKey(key)).Err())
	_, err = fl.NextToken(ctx)
	assert.ErrorIs(t, err, ErrLost, "a fair holder that lost the key draws nothing")
}
