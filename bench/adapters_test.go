package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/stockguard/stockguard/locking"
)

// acquireFunc obtains the lock (waiting as the lock kind waits) and returns its release.
type acquireFunc func(ctx context.Context) (release func(context.Context) error, err error)

// kind is one lock under test, with the options of its benchmark.
type kind struct {
	name  string
	nodes int // redis-servers it runs over
	// open sets the lock up over ss for one benchmark or test on key (its clients count
	// their calls in cc) and returns a constructor of one acquireFunc per goroutine.
	open func(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc
}

// Lease/expiry of every lock: far longer than any section, so no renewal or expiry happens
// during a benchmark (the stockguard watchdog renews every lease/3 = 10s).
const lease = 30 * time.Second

// coreKinds are the stockguard lock and its peers (redislock, redsync).
var coreKinds = []kind{
	{name: "stockguard", nodes: 1, open: openStockguard(nil)},
	{name: "redislock-1ms", nodes: 1, open: openRedislock(time.Millisecond)},
	{name: "redislock-10ms", nodes: 1, open: openRedislock(10 * time.Millisecond)},
	{name: "redsync", nodes: 1, open: openRedsync},
}

// familyKinds are the other lock kinds of package locking (fair, semaphore, spin, Redlock),
// next to redsync over the same nodes; family_test.go registers them.
var familyKinds []kind

// openStockguard is the core lock: pub/sub wake-up, watchdog, fencing tokens. opts (may be
// nil) are added to the benchmark's own: Wait -1 (no limit but the context).
func openStockguard(extra func(*locking.Options)) func(testing.TB, []*server, *callCounter, string) func() acquireFunc {
	return func(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc {
		opts := &locking.Options{Lease: lease, Wait: -1}
		if extra != nil {
			extra(opts)
		}
		c := locking.New(newClient(tb, ss[0], cc), opts)
		tb.Cleanup(func() { _ = c.Close() })
		return func() acquireFunc {
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := c.Obtain(ctx, key)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
	}
}

// openRedislock is bsm/redislock retrying with a linear backoff, without limit but the
// context.
func openRedislock(backoff time.Duration) func(testing.TB, []*server, *callCounter, string) func() acquireFunc {
	return func(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc {
		c := redislock.New(newClient(tb, ss[0], cc))
		opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(backoff)}
		return func() acquireFunc {
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := c.Obtain(ctx, key, lease, opts)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
	}
}

// openRedsync is go-redsync/redsync over the servers ss (one pool each: Redlock when there
// are several), with its defaults (8s expiry, retry after a random 50-250ms) but unlimited
// tries. A redsync Mutex is not safe for concurrent use: one per goroutine.
func openRedsync(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc {
	pools := make([]redsyncredis.Pool, len(ss))
	for i, s := range ss {
		pools[i] = goredis.NewPool(newClient(tb, s, cc))
	}
	rs := redsync.New(pools...)
	return func() acquireFunc {
		m := rs.NewMutex(key, redsync.WithTries(math.MaxInt32))
		return func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("redsync: unlock found the lock not held")
				}
				return err
			}, nil
		}
	}
}

var keySeq atomic.Int64

// uniqueKey returns a key no other benchmark or run uses.
func uniqueKey(tb testing.TB) string {
	return fmt.Sprintf("bench:%s:%d", tb.Name(), keySeq.Add(1))
}

// benchContext is the context of every lock call: a generous deadline (redislock would
// otherwise stop retrying after its TTL) that no healthy run reaches.
func benchContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}
