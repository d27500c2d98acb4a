package locking

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A waiter sleeps on a release message; a node that hangs sends none, and makes no call of
// the sleeping waiters fail: a process whose every purchase waits on such messages would not
// find out that the node hangs (its breaker counts failed calls) until a waiter's sleep ends,
// up to the holder's lease. So while a Client has waiters asleep, and Options.Breakers is set,
// a waiter that has slept livenessEvery without a message checks that the node answers: a
// PING, counted by the node's breaker like any call. One check at a time per Client; a PING
// that fails is repeated at once, up to the breaker's failure count, so that a hung node's
// breaker opens within livenessEvery + Failures × CallTimeout of the hang, and wakes every
// waiter.

// livenessEvery is how long a waiter sleeps, without a message, before a liveness check.
func (c *Client) livenessEvery() time.Duration { return 2 * c.callTimeout }

// liveness is the one check in flight of a Client.
type liveness struct{ mu sync.Mutex }

// checkLiveness PINGs the node of channel (on a Cluster, the channel's master) until it
// answers, its breaker opens, or the breaker's failure count of PINGs failed. It returns at
// once when another waiter of c is checking.
func (c *Client) checkLiveness(channel string) {
	if c.breakers == nil || !c.live.mu.TryLock() {
		return
	}
	defer c.live.mu.Unlock()
	for range c.breakers.failures {
		ctx, cancel := context.WithTimeout(context.Background(), c.callTimeout)
		err := c.pingNode(ctx, channel)
		cancel()
		if err == nil || errors.Is(err, ErrBreakerOpen) || c.notify.isClosed() {
			return
		}
	}
}

// pingNode PINGs the node that serves channel.
func (c *Client) pingNode(ctx context.Context, channel string) error {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return err
		}
		return m.Ping(ctx).Err()
	}
	return c.rdb.Ping(ctx).Err()
}
