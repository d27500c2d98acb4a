package locking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/locking"
)

// Lock the items of a cart at once, each above the fencing token stored with the item: all
// of them are held, or none. Keys are taken in sorted order (duplicates merged), so two carts
// sharing items never deadlock whatever order their items are listed in.
func ExampleClient_ObtainMany() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, nil)
	defer locker.Close()
	ctx := context.Background()

	stored := map[string]int64{"example:item:7": 41, "example:item:3": 12} // the items' fence_token
	var items []locking.KeyFloor
	for _, key := range []string{"example:item:7", "example:item:3", "example:item:7"} {
		items = append(items, locking.KeyFloor{Key: key, Floor: stored[key]})
	}
	cart, err := locker.ObtainMany(ctx, items)
	if err != nil {
		fmt.Println("obtain:", err) // ErrNotObtained: an item stayed held; else Redis failed
		return
	}
	defer cart.Release(ctx)

	fmt.Println(cart.Keys())
	for _, key := range cart.Keys() {
		fmt.Println(key, "token above the stored one:", cart.Token(key) > stored[key])
	}
	_, err = locker.TryObtain(ctx, "example:item:3")
	fmt.Println("single lock on a held item:", errors.Is(err, locking.ErrNotObtained))
	fmt.Println("release:", cart.Release(ctx))
	// Output:
	// [example:item:3 example:item:7]
	// example:item:3 token above the stored one: true
	// example:item:7 token above the stored one: true
	// single lock on a held item: true
	// release: <nil>
}

// The loss of any key ends the whole hold: the work's context is cancelled, with a cause that
// names the key.
func ExampleMulti_Context() {
	rdb := newRedis()
	defer rdb.Close()
	locker := locking.New(rdb, &locking.Options{Lease: time.Second})
	defer locker.Close()
	ctx := context.Background()

	hold, err := locker.ObtainMany(ctx, []locking.KeyFloor{{Key: "example:cart:a"}, {Key: "example:cart:b"}})
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	defer hold.Release(ctx)
	work := hold.Context(ctx)

	rdb.Del(ctx, locker.RedisKey("example:cart:b")) // someone deletes one key behind our back
	<-work.Done()                                   // the watchdog notices at its next renewal
	var lost *locking.KeyLostError
	if errors.As(context.Cause(work), &lost) {
		fmt.Println("lost:", lost.Key, errors.Is(hold.Err(), locking.ErrLost))
	}
	fmt.Println("release after the loss:", hold.Release(ctx))
	// Output:
	// lost: example:cart:b true
	// release after the loss: locking: not held
}
