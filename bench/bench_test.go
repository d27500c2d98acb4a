package bench

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/stockguard/stockguard/locking"
)

// BenchmarkUncontended is one Obtain+Release on a free key, for each lock, next to a PING:
// the floor of a lock is two round trips (acquire, release).
func BenchmarkUncontended(b *testing.B) {
	b.Run("ping", func(b *testing.B) {
		cc := new(callCounter)
		rdb := newClient(b, nodes(b, 1)[0], cc)
		ctx := benchContext(b)
		b.ReportAllocs()
		calls0 := cc.n.Load()
		for b.Loop() {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cc.n.Load()-calls0)/float64(b.N), "calls/op")
	})
	b.Run("stockguard", func(b *testing.B) {
		cc := new(callCounter)
		c := locking.New(newClient(b, nodes(b, 1)[0], cc), &locking.Options{Lease: lease})
		b.Cleanup(func() { _ = c.Close() })
		ctx, key := benchContext(b), uniqueKey(b)
		b.ReportAllocs()
		calls0 := cc.n.Load()
		for b.Loop() {
			l, err := c.Obtain(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cc.n.Load()-calls0)/float64(b.N), "calls/op")
	})
	b.Run("redislock", func(b *testing.B) {
		cc := new(callCounter)
		c := redislock.New(newClient(b, nodes(b, 1)[0], cc))
		ctx, key := benchContext(b), uniqueKey(b)
		b.ReportAllocs()
		calls0 := cc.n.Load()
		for b.Loop() {
			l, err := c.Obtain(ctx, key, lease, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cc.n.Load()-calls0)/float64(b.N), "calls/op")
	})
	b.Run("redsync", func(b *testing.B) {
		cc := new(callCounter)
		rs := redsync.New(goredis.NewPool(newClient(b, nodes(b, 1)[0], cc)))
		ctx, key := benchContext(b), uniqueKey(b)
		m := rs.NewMutex(key)
		b.ReportAllocs()
		calls0 := cc.n.Load()
		for b.Loop() {
			if err := m.LockContext(ctx); err != nil {
				b.Fatal(err)
			}
			if ok, err := m.UnlockContext(ctx); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		b.ReportMetric(float64(cc.n.Load()-calls0)/float64(b.N), "calls/op")
	})
}

// Contention workloads: 32 goroutines on one key.
const (
	workers = 32
	hold    = time.Millisecond // inside the lock
	pause   = time.Millisecond // outside it, so a release hands the lock to a waiter
)

// BenchmarkHandoff32 is the handoff workload: 32 goroutines on one key, each holding it 1ms
// and then pausing 1ms outside it, for the stockguard lock and its peers.
func BenchmarkHandoff32(b *testing.B) {
	for _, k := range coreKinds {
		b.Run(k.name, func(b *testing.B) { runContended(b, k, workers, hold, pause) })
	}
}

// BenchmarkRaw32 is the same with no hold and no pause: raw throughput.
func BenchmarkRaw32(b *testing.B) {
	for _, k := range coreKinds {
		b.Run(k.name, func(b *testing.B) { runContended(b, k, workers, 0, 0) })
	}
}

// BenchmarkFamilyHandoff32 is the handoff workload for every lock kind of package locking
// (issue 6) next to the core lock and redsync over the same nodes.
func BenchmarkFamilyHandoff32(b *testing.B) {
	if len(familyKinds) == 0 {
		b.Skip("no other lock kinds in package locking yet")
	}
	for _, k := range familyKinds {
		b.Run(k.name, func(b *testing.B) { runContended(b, k, workers, hold, pause) })
	}
}

// section is one pass through the lock: asked (Obtain called), entered (Obtain returned),
// left (hold over, Release called).
type section struct{ asked, entered, left time.Time }

// runContended runs b.N sections of k on one key, shared by n goroutines that hold the lock
// for hold and pause for pause after releasing it. It fails if two goroutines are ever
// inside at once, and reports:
//
//	sections/s          sections completed per second of wall time
//	p50-wait-ms         wait before entry (Obtain called to returned), median
//	p99-wait-ms         same, 99th percentile
//	p50-handoff-ms      from one holder calling Release to the next holder entering, median
//	redis-cmds/section  total_commands_processed delta (INFO stats, all nodes) per section
//	calls/section       client calls (round trips) per section
func runContended(b *testing.B, k kind, n int, hold, pause time.Duration) {
	ss := nodes(b, k.nodes)
	cc := new(callCounter)
	ctx, key := benchContext(b), uniqueKey(b)
	newWorker := k.open(b, ss, cc, key)
	acquire := make([]acquireFunc, n)
	for i := range acquire {
		acquire[i] = newWorker()
	}
	// One section first, so one-off costs (script loading) stay out of the counts.
	release, err := acquire[0](ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := release(ctx); err != nil {
		b.Fatal(err)
	}
	cmds0, calls0 := commandsProcessed(b, ss), cc.n.Load()

	var (
		left       atomic.Int64
		inside     atomic.Int32
		violations atomic.Int64
		wg         sync.WaitGroup
		perWorker  = make([][]section, n)
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acq := acquire[w]
			for left.Add(-1) >= 0 {
				var s section
				s.asked = time.Now()
				release, err := acq(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				s.entered = time.Now()
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				inside.Add(-1)
				s.left = time.Now()
				if err := release(ctx); err != nil {
					b.Error(err)
					return
				}
				perWorker[w] = append(perWorker[w], s)
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if v := violations.Load(); v > 0 {
		b.Fatalf("%s: %d sections found another goroutine inside the lock", k.name, v)
	}
	cmds := commandsProcessed(b, ss) - cmds0 - int64(len(ss)) // less our INFO calls
	calls := cc.n.Load() - calls0
	all := slices.Concat(perWorker...)
	if len(all) == 0 {
		return
	}
	waits := make([]time.Duration, len(all))
	for i, s := range all {
		waits[i] = s.entered.Sub(s.asked)
	}
	slices.SortFunc(all, func(a, b section) int { return a.entered.Compare(b.entered) })
	var gaps []time.Duration
	for i := 1; i < len(all); i++ {
		gaps = append(gaps, all[i].entered.Sub(all[i-1].left))
	}
	slices.Sort(waits)
	slices.Sort(gaps)
	ns := float64(len(all))
	b.ReportMetric(0, "ns/op") // 1/(sections/s): redundant
	b.ReportMetric(ns/elapsed.Seconds(), "sections/s")
	b.ReportMetric(ms(percentile(waits, 0.50)), "p50-wait-ms")
	b.ReportMetric(ms(percentile(waits, 0.99)), "p99-wait-ms")
	b.ReportMetric(ms(percentile(gaps, 0.50)), "p50-handoff-ms")
	b.ReportMetric(float64(cmds)/ns, "redis-cmds/section")
	b.ReportMetric(float64(calls)/ns, "calls/section")
}

// percentile returns the p-quantile (nearest rank) of sorted d; zero for none.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
