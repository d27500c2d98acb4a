package redisproc

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// setupLimit bounds the wait for a cluster or a Sentinel set to settle.
const setupLimit = 20 * time.Second

// withClient runs fn with a short-lived client of addr.
func withClient(addr string, fn func(rdb *redis.Client) error) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
	defer rdb.Close()
	return fn(rdb)
}

// poll calls ok every 20ms until it reports true or ctx ends; the last error is returned then.
func poll(ctx context.Context, ok func() (bool, error)) error {
	var last error
	for {
		done, err := ok()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return last
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// ErrOf returns the error of a (value, error) pair, and stops the value when there is one, so
// that a call expected to fail can be checked in one line: assert.Error(t, ErrOf(Start...)).
func ErrOf[T interface{ Close() }](v T, err error) error {
	if err == nil {
		v.Close()
	}
	return err
}
