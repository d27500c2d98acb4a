package locking

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkPing is the Redis round trip of the same machine, for scale: an uncontended
// Obtain+Release is two script round trips.
func BenchmarkPing(b *testing.B) {
	rdb := newRedis(b, nil)
	ctx := context.Background()
	for b.Loop() {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkObtainRelease is one uncontended Obtain+Release: two round trips plus the
// watchdog goroutine's start and stop.
func BenchmarkObtainRelease(b *testing.B) {
	c := newClient(b, nil, nil)
	ctx := context.Background()
	key := uniqueKey(b)
	for b.Loop() {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContended32 is the handoff workload: 32 goroutines on one key, each holding it
// 1ms and then pausing 1ms outside it, so a release hands the lock to a waiter. It reports
// sections per second, the wait before entry (p50, p99) and Redis commands per section.
func BenchmarkContended32(b *testing.B) {
	benchContended(b, 32, time.Millisecond, time.Millisecond)
}

// BenchmarkContended32Raw is the same with no hold and no pause: raw throughput.
func BenchmarkContended32Raw(b *testing.B) {
	benchContended(b, 32, 0, 0)
}

func benchContended(b *testing.B, workers int, hold, pause time.Duration) {
	c := newClient(b, nil, nil)
	ctx := context.Background()
	key := uniqueKey(b)
	before := commandsProcessed(b, c.rdb)
	var (
		left  atomic.Int64
		mu    sync.Mutex
		waits = make([]time.Duration, 0, b.N)
		wg    sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				l, err := c.Obtain(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				waited := time.Since(t0)
				if hold > 0 {
					time.Sleep(hold)
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, waited)
				mu.Unlock()
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "sections/s")
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds())/1000, "p50-wait-ms")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "p99-wait-ms")
	cmds := commandsProcessed(b, c.rdb) - before
	b.ReportMetric(float64(cmds)/float64(len(waits)), "redis-cmds/section")
	n := float64(len(waits))
	b.Logf("per section: messages %.2f, woken by message %.2f, by timer %.2f",
		float64(c.notify.messages.Load())/n, float64(c.notify.wokenByMessage.Load())/n,
		float64(c.notify.wokenByTimer.Load())/n)
}

// commandsProcessed reads total_commands_processed from INFO stats.
func commandsProcessed(b *testing.B, rdb redis.UniversalClient) int64 {
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkHandoff measures the time from a release to the entry of the waiter it wakes (the
// waiter is asleep, with a 10s TTL fallback: only the release message can wake it in time).
// It reports the p50 and p99 of that latency next to the Redis round trip.
func BenchmarkHandoff(b *testing.B) {
	holder := newClient(b, nil, &Options{Lease: 10 * time.Second})
	waiter := newClient(b, nil, &Options{Lease: 10 * time.Second})
	ctx := context.Background()
	key := uniqueKey(b)
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		l, err := holder.Obtain(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			w, err := waiter.Obtain(ctx, key)
			got <- time.Now()
			if err == nil {
				_ = w.Release(ctx)
			}
		}()
		for waiter.notify.sleeping.Load() != 1 {
			time.Sleep(50 * time.Microsecond)
		}
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-got).Sub(released))
		<-finished
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-handoff-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-handoff-ms")
	if t := waiter.notify.wokenByTimer.Load(); t > 0 {
		b.Errorf("%d wake-ups by the TTL timer", t)
	}
}
