package bench

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/locking"
)

// The lock family of package locking, each under the 32-way handoff workload next
// to the core lock and to redsync over the same three nodes.
func init() {
	familyKinds = append(familyKinds,
		kind{name: "stockguard", nodes: 1, open: openStockguard(nil)},
		kind{name: "fair", nodes: 1, open: openFair},
		kind{name: "semaphore-1", nodes: 1, open: openSemaphore(1)},
		kind{name: "spin", nodes: 1, open: openStockguard(func(o *locking.Options) {
			o.Spin = &locking.SpinOptions{} // the defaults: 2ms doubling to 50ms, jittered
		})},
		kind{name: "redlock-3", nodes: 3, open: openRedlock},
		kind{name: "redsync-3", nodes: 3, open: openRedsync},
	)
}

// familyOptions are the Options of every family kind: as the core lock's in the benchmarks.
func familyOptions() *locking.Options { return &locking.Options{Lease: lease, Wait: -1} }

// openFair is the fair lock: FIFO queue in Redis, only the head waiter woken.
func openFair(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc {
	c := locking.New(newClient(tb, ss[0], cc), familyOptions())
	tb.Cleanup(func() { _ = c.Close() })
	return func() acquireFunc {
		return func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.ObtainFair(ctx, key)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}
}

// openSemaphore is the expiring semaphore with n permits (1: a mutex).
func openSemaphore(n int) func(testing.TB, []*server, *callCounter, string) func() acquireFunc {
	return func(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc {
		s := locking.NewSemaphore(newClient(tb, ss[0], cc), n, familyOptions())
		tb.Cleanup(func() { _ = s.Close() })
		return func() acquireFunc {
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := s.Acquire(ctx, key)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
	}
}

// openRedlock is Redlock over the servers ss (waiting by spinning with the default backoff).
func openRedlock(tb testing.TB, ss []*server, cc *callCounter, key string) func() acquireFunc {
	clients := make([]redis.UniversalClient, len(ss))
	for i, s := range ss {
		clients[i] = newClient(tb, s, cc)
	}
	r := locking.NewRedlock(clients, familyOptions())
	tb.Cleanup(func() { _ = r.Close() })
	return func() acquireFunc {
		return func(ctx context.Context) (func(context.Context) error, error) {
			l, err := r.Obtain(ctx, key)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}
}
