package locking

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The lock family under the handoff workload of BenchmarkContended32: 32 goroutines on one
// key, each holding it 1ms, then pausing 1ms outside it. Reported: sections per second, the
// wait before entry (p50, p99), the handoff latency (from the start of a Release to the next
// entry, p50 and p99) and the Redis commands per section summed over every node.

// BenchmarkLock32 is the core lock under this workload, for comparison (BenchmarkContended32
// measures the same without the handoff latency).
func BenchmarkLock32(b *testing.B) {
	c := newClient(b, nil, nil)
	key := uniqueKey(b)
	benchFamily(b, func(ctx context.Context) (*Lock, error) { return c.Obtain(ctx, key) }, c.rdb)
}

// BenchmarkFair32 is the fair lock: FIFO queue, one wake-up per release, to the head.
func BenchmarkFair32(b *testing.B) {
	c := newClient(b, nil, nil)
	key := uniqueKey(b)
	benchFamily(b, func(ctx context.Context) (*Lock, error) { return c.ObtainFair(ctx, key) }, c.rdb)
}

// BenchmarkSpin32 is the core lock in spin mode (default backoff 2ms..50ms).
func BenchmarkSpin32(b *testing.B) {
	c := newClient(b, nil, &Options{Spin: &SpinOptions{}})
	key := uniqueKey(b)
	benchFamily(b, func(ctx context.Context) (*Lock, error) { return c.Obtain(ctx, key) }, c.rdb)
}

// BenchmarkRedlock32 is Redlock over 3 redis-servers (quorum 2).
func BenchmarkRedlock32(b *testing.B) {
	_, rdbs := startNodes(b, 3)
	r := newRedlock(b, rdbs, nil)
	key := uniqueKey(b)
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, c := range rdbs {
		nodes[i] = c
	}
	benchFamily(b, func(ctx context.Context) (*Lock, error) { return r.Obtain(ctx, key) }, nodes...)
}

// BenchmarkSemaphore32 is the semaphore with 4 permits: up to 4 sections at once.
func BenchmarkSemaphore32(b *testing.B) {
	s := newSemaphore(b, nil, 4, nil)
	key := uniqueKey(b)
	benchFamily(b, func(ctx context.Context) (*Lock, error) { return s.Acquire(ctx, key) }, s.c.rdb)
}

func benchFamily(b *testing.B, obtain func(context.Context) (*Lock, error), nodes ...redis.UniversalClient) {
	const workers, hold, pause = 32, time.Millisecond, time.Millisecond
	ctx := context.Background()
	commands := func() (n int64) {
		for _, rdb := range nodes {
			n += commandsProcessed(b, rdb)
		}
		return n
	}
	before := commands()
	var (
		left        atomic.Int64
		lastRelease atomic.Int64 // unix ns when the latest Release started
		mu          sync.Mutex
		waits       = make([]time.Duration, 0, b.N)
		handoffs    = make([]time.Duration, 0, b.N)
		wg          sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				l, err := obtain(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				entered := time.Now()
				handoff := time.Duration(-1)
				if r := lastRelease.Load(); r > 0 && r > t0.UnixNano() { // released while we waited
					handoff = entered.Sub(time.Unix(0, r))
				}
				time.Sleep(hold)
				lastRelease.Store(time.Now().UnixNano())
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, entered.Sub(t0))
				if handoff >= 0 {
					handoffs = append(handoffs, handoff)
				}
				mu.Unlock()
				time.Sleep(pause)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(waits) == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	slices.Sort(waits)
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "sections/s")
	b.ReportMetric(ms(waits[len(waits)/2]), "p50-wait-ms")
	b.ReportMetric(ms(waits[len(waits)*99/100]), "p99-wait-ms")
	if len(handoffs) > 0 {
		slices.Sort(handoffs)
		b.ReportMetric(ms(handoffs[len(handoffs)/2]), "p50-handoff-ms")
		b.ReportMetric(ms(handoffs[len(handoffs)*99/100]), "p99-handoff-ms")
	}
	b.ReportMetric(float64(commands()-before)/float64(len(waits)), "redis-cmds/section")
}
