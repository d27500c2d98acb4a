package bench

import (
	"fmt"
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
// the floor of a lock is two round trips (acquire, release). Besides time and allocations
// it reports round trips per op, the time per op spent outside Redis calls (in the lock
// library itself: goroutines, timers, contexts) and the redis-server's CPU time per op.
func BenchmarkUncontended(b *testing.B) {
	b.Run("ping", func(b *testing.B) {
		rdb, cc := newClient(b, nodes(b, 1)[0], nil), new(callCounter)
		rdb.AddHook(cc)
		ctx := benchContext(b)
		measureOps(b, cc, func() error { return rdb.Ping(ctx).Err() })
	})
	b.Run("stockguard", func(b *testing.B) {
		cc := new(callCounter)
		c := locking.New(newClient(b, nodes(b, 1)[0], cc), &locking.Options{Lease: lease})
		b.Cleanup(func() { _ = c.Close() })
		ctx, key := benchContext(b), uniqueKey(b)
		measureOps(b, cc, func() error {
			l, err := c.Obtain(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("redislock", func(b *testing.B) {
		cc := new(callCounter)
		c := redislock.New(newClient(b, nodes(b, 1)[0], cc))
		ctx, key := benchContext(b), uniqueKey(b)
		measureOps(b, cc, func() error {
			l, err := c.Obtain(ctx, key, lease, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("redsync", func(b *testing.B) {
		cc := new(callCounter)
		rs := redsync.New(goredis.NewPool(newClient(b, nodes(b, 1)[0], cc)))
		ctx, key := benchContext(b), uniqueKey(b)
		m := rs.NewMutex(key)
		measureOps(b, cc, func() error {
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			if ok, err := m.UnlockContext(ctx); err != nil || !ok {
				return fmt.Errorf("redsync unlock: %v %w", ok, err)
			}
			return nil
		})
	})
}

// measureOps runs op b.N times on the first server, once before to load scripts, and
// reports calls/op, lib-µs/op (wall time outside the calls cc timed), redis-cpu-µs/op (the
// server process's CPU time: networking and execution) and redis-exec-µs/op (the time Redis
// spent executing the commands and scripts themselves, from INFO commandstats).
func measureOps(b *testing.B, cc *callCounter, op func() error) {
	if err := op(); err != nil {
		b.Fatal(err)
	}
	ss := nodes(b, 1)
	st0, calls0, ns0 := serverStats(b, ss), cc.n.Load(), cc.ns.Load()
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	st := serverStats(b, ss).sub(st0, 1)
	n := float64(b.N)
	b.ReportMetric(float64(cc.n.Load()-calls0)/n, "calls/op")
	b.ReportMetric(float64(elapsed.Nanoseconds()-(cc.ns.Load()-ns0))/n/1000, "lib-µs/op")
	b.ReportMetric(st.cpu*1e6/n, "redis-cpu-µs/op")
	b.ReportMetric(float64(st.execUsec)/n, "redis-exec-µs/op")
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
// (its lock family) next to the core lock and redsync over the same nodes.
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
//	p99-handoff-ms      same, 99th percentile
//	redis-cmds/section  total_commands_processed delta (INFO stats, all nodes) per section
//	redis-cpu-µs/section  CPU time of the redis-servers (INFO cpu) per section
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
	st0, calls0 := serverStats(b, ss), cc.n.Load()

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
	st := serverStats(b, ss).sub(st0, len(ss))
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
	b.ReportMetric(ms(percentile(gaps, 0.99)), "p99-handoff-ms")
	b.ReportMetric(float64(st.commands)/ns, "redis-cmds/section")
	b.ReportMetric(st.cpu*1e6/ns, "redis-cpu-µs/section")
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
