package inventory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

func TestLockSet(t *testing.T) {
	var s inventory.LockSet
	var acquired int
	h := locking.JoinHooks(s.Hooks("p:"), locking.Hooks{Acquired: func(string, int64, time.Duration) { acquired++ }})
	held := func(name string, id, token int64) inventory.HeldLock {
		return inventory.HeldLock{Name: name, ItemID: id, Token: token, RedisKey: "p:{" + name + "}", FenceKey: "p:{" + name + "}:fence"}
	}
	h.Acquired("item:1", 4, 0)
	h.Acquired("item:1", 6, 0) // the old holder has not noticed its loss yet
	h.Acquired("item:1", 6, 0) // re-entry reports the same token: one entry
	h.Acquired("queue", 1, 0)  // not an item lock: no item id
	assert.Equal(t, []inventory.HeldLock{held("item:1", 1, 4), held("item:1", 1, 6), held("queue", 0, 1)}, s.HeldLocks())
	h.Lost("item:1", errors.New("lost")) // the oldest goes
	assert.Equal(t, []inventory.HeldLock{held("item:1", 1, 6), held("queue", 0, 1)}, s.HeldLocks())
	h.Released("item:1", time.Second)
	h.Released("queue", time.Second)
	h.Released("item:3", time.Second) // unknown: ignored
	assert.Empty(t, s.HeldLocks())
	assert.Equal(t, 4, acquired)
}

func TestItemLockName(t *testing.T) {
	assert.Equal(t, "item:42", inventory.ItemLockName(42))
	id, ok := inventory.ItemOfLock(inventory.ItemLockName(42))
	assert.True(t, ok)
	assert.Equal(t, int64(42), id)
	for _, name := range []string{"item:", "item:x", "item:-1", "item:0", "queue", ""} {
		_, ok := inventory.ItemOfLock(name)
		assert.False(t, ok, name)
	}
}
