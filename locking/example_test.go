package locking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/locking"
)

// newRedis returns a go-redis client built the way locking needs it: with
// ContextTimeoutEnabled, so that call timeouts are honoured, and without go-redis retries
// (MaxRetries: -1), which would resend a script whose reply was lost.
func newRedis() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: locking.RedisAddrForExamples(), ContextTimeoutEnabled: true, MaxRetries: -1})
}

// Obtain a lock, run the work under the lock's context (cancelled if the lock is lost), and
// release it.
func Example() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "example:item:1")
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	defer lock.Release(ctx)

	work := lock.Context(ctx)
	select {
	case <-work.Done():
		fmt.Println("lock lost, work abandoned:", context.Cause(work))
	case <-time.After(10 * time.Millisecond): // the guarded work
		fmt.Println("work done under the lock; token > 0:", lock.Token() > 0)
	}
	// Output:
	// work done under the lock; token > 0: true
}

// TryObtain does not wait: a lock held by another answers ErrNotObtained at once.
func ExampleClient_TryObtain() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	first, _ := locker.TryObtain(ctx, "example:try")
	_, err := locker.TryObtain(ctx, "example:try")
	fmt.Println(errors.Is(err, locking.ErrNotObtained))
	fmt.Println(first.Release(ctx))
	fmt.Println(first.Release(ctx))
	// Output:
	// true
	// <nil>
	// locking: not held
}

// A wait limit per call, and a context that ends the wait: both answer ErrNotObtained, the
// second joined with the context's error.
func ExampleWithWait() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	held, _ := locker.Obtain(ctx, "example:wait")
	defer held.Release(ctx)

	_, err := locker.Obtain(ctx, "example:wait", locking.WithWait(20*time.Millisecond))
	fmt.Println(errors.Is(err, locking.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = locker.Obtain(short, "example:wait")
	fmt.Println(errors.Is(err, locking.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true false
	// true true
}

// WithFloor keeps fencing tokens above a value stored with the guarded data, even after
// Redis lost its counter.
func ExampleWithFloor() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	const storedFence = 1000 // e.g. the fence_token column of the row the lock guards
	lock, err := locker.Obtain(ctx, "example:floor", locking.WithFloor(storedFence))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	fmt.Println(lock.Token() > storedFence)
	// Output:
	// true
}

// Under the lock's context, obtaining the same key re-enters the lock instead of waiting
// for itself; the key is released with the outermost Release.
func ExampleLock_Context() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	outer, _ := locker.Obtain(ctx, "example:reentry")
	lockCtx := outer.Context(ctx)

	inner, err := locker.Obtain(lockCtx, "example:reentry") // re-entry: no wait
	fmt.Println(err, inner.Token() == outer.Token())
	fmt.Println(inner.Release(ctx))

	_, err = locker.TryObtain(ctx, "example:reentry") // a plain context does not re-enter
	fmt.Println(err)

	fmt.Println(outer.Release(ctx), lockCtx.Err())
	// Output:
	// <nil> true
	// <nil>
	// locking: not obtained
	// <nil> context canceled
}
