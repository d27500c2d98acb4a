package locking

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

func TestFencingTokensIncreaseAcrossClients(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	const clients, perGoroutine, goroutinesPerClient = 4, 125, 2 // 1,000 acquisitions
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	for range clients {
		c := newClient(t, srv, nil)
		for range goroutinesPerClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perGoroutine {
					l, err := c.Obtain(ctx, key)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock() // the order in which holders held it
					tokens = append(tokens, l.Token())
					mu.Unlock()
					assert.NoError(t, l.Release(ctx))
				}
			}()
		}
	}
	wg.Wait()
	require.Len(t, tokens, clients*goroutinesPerClient*perGoroutine)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "token %d", i)
	}
	last := tokens[len(tokens)-1]

	// Redis loses its counter (FLUSHALL, a restart without persistence, a failover).
	c := newClient(t, srv, nil)
	require.NoError(t, c.rdb.FlushAll(ctx).Err())
	l, err := c.Obtain(ctx, key, WithFloor(last))
	require.NoError(t, err)
	assert.Equal(t, last+1, l.Token(), "max(counter, floor)+1")
	require.NoError(t, l.Release(ctx))

	l, err = c.Obtain(ctx, key, WithFloor(5))
	require.NoError(t, err)
	assert.Equal(t, last+2, l.Token(), "a floor below the counter changes nothing")
	stored, err := c.rdb.Get(ctx, c.keysFor(key).fence).Int64()
	require.NoError(t, err)
	assert.Equal(t, l.Token(), stored, "the counter is the last token issued")
	require.NoError(t, l.Release(ctx))
}
