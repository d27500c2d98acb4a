package locking

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeysOf(t *testing.T) {
	assert.Equal(t, Keys{Hash: "p:{item:42}", Fence: "p:{item:42}:fence", Channel: "p:{item:42}:released"},
		KeysOf("p:", "item:42"))
	c := New(nil, &Options{KeyPrefix: "shop:lock:"})
	defer c.Close()
	assert.Equal(t, "shop:lock:{item:42}", c.RedisKey("item:42"))
	d := New(nil, nil)
	defer d.Close()
	assert.Equal(t, DefaultKeyPrefix+"{item:42}", d.RedisKey("item:42"))
}

// The names KeysOf and RedisKey give are the ones a held lock really uses in Redis: the
// hash holds the owner, the fence counter holds the token, and the release is published on
// the channel.
func TestKeysOfAreTheLocksKeys(t *testing.T) {
	rdb := newRedis(t, nil)
	const prefix = "keys-test:"
	c := New(rdb, &Options{KeyPrefix: prefix})
	defer c.Close()
	ctx := context.Background()
	key := t.Name()
	k := KeysOf(prefix, key)
	require.Equal(t, k.Hash, c.RedisKey(key))

	ps := rdb.Subscribe(ctx, k.Channel)
	defer ps.Close()
	_, err := ps.Receive(ctx) // the subscription is confirmed
	require.NoError(t, err)

	l, err := c.Obtain(ctx, key)
	require.NoError(t, err)
	fields, err := rdb.HLen(ctx, k.Hash).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), fields, "the lock hash has the owner's field")
	fence, err := rdb.Get(ctx, k.Fence).Result()
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(l.Token(), 10), fence)

	require.NoError(t, l.Release(ctx))
	msg, err := ps.ReceiveMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, k.Channel, msg.Channel)
	n, err := rdb.Exists(ctx, k.Hash).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// A Redlock's RedisKey is the lock hash on each of its nodes.
func TestRedlockRedisKey(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs, &Options{KeyPrefix: "rl:"})
	ctx := context.Background()
	key := t.Name()
	assert.Equal(t, KeysOf("rl:", key).Hash, r.RedisKey(key))
	count := func() int { // nodes holding r.RedisKey(key)
		n := 0
		for _, rdb := range rdbs {
			if e, err := rdb.Exists(ctx, r.RedisKey(key)).Result(); err == nil && e == 1 {
				n++
			}
		}
		return n
	}
	l, err := r.Obtain(ctx, key)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, count(), r.Quorum()) // Obtain returns once a quorum took it
	require.Eventually(t, func() bool { return count() == len(rdbs) }, 2*time.Second, 5*time.Millisecond)
	require.NoError(t, l.Release(ctx))
	require.Eventually(t, func() bool { return count() == 0 }, 2*time.Second, 5*time.Millisecond)
}
