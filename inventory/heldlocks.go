package inventory

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/locking"
)

// LockObserver receives the events of the locks a lock client takes (metrics, event
// streams); ObserverHooks turns one into locking.Hooks. The methods must be quick: they run on
// the goroutine of the event (Obtain, Release, the watchdog).
type LockObserver interface {
	LockAcquired(name string, token int64, waited time.Duration)
	LockRenewed(name string)
	LockLost(name string, err error)
	LockReleased(name string, held time.Duration)
}

// ObserverHooks returns hooks that call o.
func ObserverHooks(o LockObserver) locking.Hooks {
	return locking.Hooks{Acquired: o.LockAcquired, Renewed: o.LockRenewed, Lost: o.LockLost, Released: o.LockReleased}
}

// HeldLock is one lock this process holds.
type HeldLock struct {
	Name     string `json:"name"`                // the lock's name, e.g. "item:1"
	ItemID   int64  `json:"item_id,omitempty"`   // the item it protects, when it is an item lock
	Token    int64  `json:"token"`               // its fencing token
	RedisKey string `json:"redis_key"`           // the Redis key of the lock
	FenceKey string `json:"fence_key,omitempty"` // the Redis key of its fencing counter
}

// LockSet records the locks this process holds, fed by locking hooks (LockSet.Hooks): the
// demo's /api/debug/locks shows it, so the load test can find and pause a lock holder. The
// zero value is ready to use; it is safe for concurrent use.
//
// The hooks of Released and Lost carry no token: when one name has several entries (an old
// holder that has not noticed its loss yet, and the new holder), the one with the smallest
// token, the oldest, is removed. A re-entrant hold is one entry.
type LockSet struct {
	mu   sync.Mutex
	held map[string][]HeldLock // lock name -> holds, ascending by token
}

// Hooks returns the hooks that keep the set up to date for the locks of one lock client whose
// key prefix is prefix; join them with others by locking.JoinHooks.
func (s *LockSet) Hooks(prefix string) locking.Hooks {
	return locking.Hooks{
		Acquired: func(name string, token int64, _ time.Duration) {
			keys := locking.KeysOf(prefix, name)
			id, _ := ItemOfLock(name)
			s.add(HeldLock{Name: name, ItemID: id, Token: token, RedisKey: keys.Hash, FenceKey: keys.Fence})
		},
		Released: func(name string, _ time.Duration) { s.removeOldest(name) },
		Lost:     func(name string, _ error) { s.removeOldest(name) },
	}
}

// HeldLocks returns the held locks sorted by name and token.
func (s *LockSet) HeldLocks() []HeldLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	locks := []HeldLock{}
	for _, holds := range s.held {
		locks = append(locks, holds...)
	}
	slices.SortFunc(locks, func(a, b HeldLock) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return locks
}

func (s *LockSet) add(h HeldLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[string][]HeldLock)
	}
	holds := s.held[h.Name]
	i, found := slices.BinarySearchFunc(holds, h.Token, func(e HeldLock, t int64) int { return cmp.Compare(e.Token, t) })
	if !found { // re-entry reports the same token again
		s.held[h.Name] = slices.Insert(holds, i, h)
	}
}

func (s *LockSet) removeOldest(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	holds := s.held[name]
	if len(holds) <= 1 {
		delete(s.held, name)
		return
	}
	s.held[name] = holds[1:]
}
