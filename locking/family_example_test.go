package locking_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/locking"
)

// A fair lock serves its waiters in arrival order, waking only the head of the queue.
func ExampleClient_ObtainFair() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	holder, _ := locker.ObtainFair(ctx, "example:fair")
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range []string{"first", "second", "third"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := locker.ObtainFair(ctx, "example:fair")
			if err != nil {
				fmt.Println(err)
				return
			}
			mu.Lock()
			fmt.Println(name)
			mu.Unlock()
			l.Release(ctx)
		}()
		time.Sleep(50 * time.Millisecond) // let it join the queue before the next arrives
	}
	_, err := locker.TryObtainFair(ctx, "example:fair") // never jumps the queue
	fmt.Println(err)
	holder.Release(ctx)
	wg.Wait()
	// Output:
	// locking: not obtained
	// first
	// second
	// third
}

// Redlock holds a lock on a majority of independent Redis nodes. Here three databases of
// one server stand in for three servers; in production each node is its own deployment.
func ExampleNewRedlock() {
	var nodes []redis.UniversalClient
	for db := range 3 {
		c := redis.NewClient(&redis.Options{Addr: locking.RedisAddrForExamples(), DB: db, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer c.Close()
		nodes = append(nodes, c)
	}
	rl := locking.NewRedlock(nodes, &locking.Options{Lease: 10 * time.Second})
	defer rl.Close()
	ctx := context.Background()

	lock, err := rl.Obtain(ctx, "example:redlock", locking.WithFloor(41))
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	fmt.Println("quorum:", rl.Quorum(), "token above the floor:", lock.Token() > 41)
	_, err = rl.TryObtain(ctx, "example:redlock")
	fmt.Println(errors.Is(err, locking.ErrNotObtained))
	fmt.Println(lock.Release(ctx))
	// Output:
	// quorum: 2 token above the floor: true
	// true
	// <nil>
}

// A semaphore admits N holders per key; permits of crashed holders come back after their
// lease.
func ExampleNewSemaphore() {
	rdb := newRedis()
	defer rdb.Close()
	sem := locking.NewSemaphore(rdb, 2, nil)
	defer sem.Close()
	ctx := context.Background()

	a, _ := sem.Acquire(ctx, "example:sem")
	b, _ := sem.Acquire(ctx, "example:sem")
	_, err := sem.TryAcquire(ctx, "example:sem")
	fmt.Println(err)

	a.Release(ctx)
	c, err := sem.Acquire(ctx, "example:sem", locking.WithWait(time.Second))
	fmt.Println(err, c.Token())
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// locking: not obtained
	// <nil> 0
}
