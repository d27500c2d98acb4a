package bench

import (
	"sync"
	"testing"
	"time"
)

// TestMutualExclusion checks each adapter: a few goroutines on one key, and a counter
// updated with a read, a pause and a write inside the lock never loses an update. It is
// quick: `go test .` here runs it, not the benchmarks.
func TestMutualExclusion(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range append(append([]kind(nil), coreKinds...), familyKinds...) {
		if seen[k.name] {
			continue
		}
		seen[k.name] = true
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			const goroutines, each = 4, 8
			ss := nodes(t, k.nodes)
			ctx, key := benchContext(t), uniqueKey(t)
			newWorker := k.open(t, ss, new(callCounter), key)
			var (
				wg      sync.WaitGroup
				counter int // guarded by the lock under test, on purpose not by a mutex
				mu      sync.Mutex
				inside  int
				overlap bool
			)
			for range goroutines {
				wg.Add(1)
				acquire := newWorker()
				go func() {
					defer wg.Done()
					for range each {
						release, err := acquire(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						inside++
						overlap = overlap || inside > 1
						mu.Unlock()
						v := counter
						time.Sleep(200 * time.Microsecond)
						counter = v + 1
						mu.Lock()
						inside--
						mu.Unlock()
						if err := release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if overlap {
				t.Fatal("two goroutines were inside the lock at once")
			}
			if counter != goroutines*each {
				t.Fatalf("counter = %d, want %d", counter, goroutines*each)
			}
		})
	}
}
