package storeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// HeldLock is one lock an instance holds, as GET /api/debug/locks shows it: the Redis keys
// come from the server, so no client rebuilds the key layout.
type HeldLock struct {
	Name     string `json:"name"`                // the lock's name, e.g. "item:1"
	ItemID   int64  `json:"item_id,omitempty"`   // the item it protects, when it is an item lock
	Token    int64  `json:"token"`               // its fencing token
	RedisKey string `json:"redis_key"`           // the Redis key of the lock
	FenceKey string `json:"fence_key,omitempty"` // the Redis key of its fencing counter
}

// Locks is the answer of GET /api/debug/locks: the instance's process id and the locks it holds.
type Locks struct {
	PID   int        `json:"pid"`
	Locks []HeldLock `json:"locks"`
}

// Item returns the lock of item itemID in l.
func (l Locks) Item(itemID int64) (HeldLock, bool) {
	for _, h := range l.Locks {
		if h.ItemID == itemID {
			return h, true
		}
	}
	return HeldLock{}, false
}

// GetLocks asks the instance at base which locks it holds. An instance outside demo mode
// answers 404: the error then wraps ErrNotDemo.
func GetLocks(ctx context.Context, hc *http.Client, base string) (Locks, error) {
	var out Locks
	err := GetJSON(ctx, hc, base, "/api/debug/locks", &out)
	var ae *Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return out, fmt.Errorf("%s: %w", base, ErrNotDemo)
	}
	return out, err
}

// Holder is an instance found holding an item's lock.
type Holder struct {
	Index int      // its position in the base URLs asked
	URL   string   // its base URL
	PID   int      // its process id, as it answered
	Lock  HeldLock // the lock it holds
}

// Holders asks every instance at bases, at once, which locks it holds, and returns those that
// hold item itemID's lock, in the order of bases. An instance that does not answer before ctx
// ends (a stopped process) or answers an error is left out. Two instances can hold one item's
// lock at once: a holder whose lease ran out before it noticed, and the next one.
func Holders(ctx context.Context, hc *http.Client, bases []string, itemID int64) []Holder {
	found := make([]*Holder, len(bases))
	var wg sync.WaitGroup
	for i, base := range bases {
		wg.Add(1)
		go func() { // owner: Holders, which waits for it
			defer wg.Done()
			l, err := GetLocks(ctx, hc, base)
			if err != nil {
				return
			}
			if h, ok := l.Item(itemID); ok {
				found[i] = &Holder{Index: i, URL: base, PID: l.PID, Lock: h}
			}
		}()
	}
	wg.Wait()
	var out []Holder
	for _, h := range found {
		if h != nil {
			out = append(out, *h)
		}
	}
	return out
}

// FindHolder returns the first instance of bases (in their order) that holds item itemID's
// lock, and false when none does (see Holders).
func FindHolder(ctx context.Context, hc *http.Client, bases []string, itemID int64) (Holder, bool) {
	hs := Holders(ctx, hc, bases, itemID)
	if len(hs) == 0 {
		return Holder{}, false
	}
	return hs[0], true
}

// AwaitHolder asks every instance of bases, every interval, until one holds item itemID's
// lock (see FindHolder); one round of questions waits at most a second for its answers. It
// returns false when ctx ends first.
func AwaitHolder(ctx context.Context, hc *http.Client, bases []string, itemID int64, interval time.Duration) (Holder, bool) {
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		h, ok := FindHolder(rctx, hc, bases, itemID)
		cancel()
		if ok {
			return h, true
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return Holder{}, false
		case <-t.C:
		}
	}
}

// StillHeld reports whether rdb shows the lock still held as l: its key exists and its
// fencing counter is still l's token (no one took the lock after l's holder). An error
// reading Redis is false.
func StillHeld(ctx context.Context, rdb redis.Cmdable, l HeldLock) bool {
	_, ok := LeaseLeft(ctx, rdb, l)
	return ok
}

// Settle makes two round trips to rdb, after which the commands a process wrote before it was
// frozen (SIGSTOP, every thread stopped: procutil.WaitStopped) have run: on loopback what it
// wrote is in redis-server's socket buffer, and Redis runs it in the event-loop turn that sees
// it; two round trips of ours span a whole turn after that. So a check that a frozen holder
// still holds its lock (StillHeld, LeaseLeft) is not overtaken by its own release in flight.
// (An in-process miniredis serves each connection on a goroutine of its own, with no such
// turn: there it narrows the window without closing it.)
func Settle(ctx context.Context, rdb redis.Cmdable) error {
	for range 2 {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// LeaseLeft reports how long the lock held as l has left in Redis (its key's PTTL), read in
// one MULTI with its fencing counter: false when it is no longer held as l (see StillHeld),
// or Redis could not be read. A key without a TTL has 0 left and true.
func LeaseLeft(ctx context.Context, rdb redis.Cmdable, l HeldLock) (time.Duration, bool) {
	var fence *redis.StringCmd
	var ttl *redis.DurationCmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		fence = p.Get(ctx, l.FenceKey)
		ttl = p.PTTL(ctx, l.RedisKey)
		return nil
	}); err != nil {
		return 0, false
	}
	got, err := fence.Int64()
	if err != nil || got != l.Token {
		return 0, false
	}
	switch d := ttl.Val(); {
	case d == -2: // no key (go-redis leaves PTTL's -2 and -1 as they are)
		return 0, false
	case d < 0: // no TTL
		return 0, true
	default:
		return d, true
	}
}
