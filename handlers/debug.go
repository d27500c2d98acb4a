package handlers

import (
	"cmp"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/locking"
)

// HeldLock is one lock this process holds, as /api/debug/locks shows it.
type HeldLock struct {
	Key   string `json:"key"`   // the lock's name, e.g. "item:1"
	Token int64  `json:"token"` // its fencing token
}

// DebugSource lists the locks this process holds right now.
type DebugSource interface {
	HeldLocks() []HeldLock
}

// debugLocksBody is the answer of GET /api/debug/locks.
type debugLocksBody struct {
	PID   int        `json:"pid"`
	Locks []HeldLock `json:"locks"`
}

// debugLocks answers GET /api/debug/locks in demo mode (404 otherwise): the process id and the
// locks it holds, so the load test's chaos mode can find and pause a lock holder.
func (s *server) debugLocks(c *gin.Context) {
	if !s.demo {
		writeError(c, errDebugDisabled)
		return
	}
	locks := []HeldLock{}
	if s.debug != nil {
		locks = append(locks, s.debug.HeldLocks()...)
	}
	c.JSON(http.StatusOK, debugLocksBody{PID: os.Getpid(), Locks: locks})
}

// LockSet is a DebugSource fed by lock hooks: Hooks().Acquired adds a lock, Released and Lost
// remove it. The zero value is ready to use; it is safe for concurrent use.
//
// The hooks of Released and Lost carry no token: when one key has several entries (an old
// holder that has not noticed its loss yet, and the new holder), the one with the smallest
// token, the oldest, is removed. A re-entrant hold is one entry.
type LockSet struct {
	mu   sync.Mutex
	held map[string][]int64 // lock name -> tokens, ascending
}

// Hooks returns the hooks that keep the set up to date; join them with others by JoinHooks.
func (s *LockSet) Hooks() locking.Hooks {
	return locking.Hooks{
		Acquired: func(key string, token int64, _ time.Duration) { s.add(lockName(key), token) },
		Released: func(key string, _ time.Duration) { s.removeOldest(lockName(key)) },
		Lost:     func(key string, _ error) { s.removeOldest(lockName(key)) },
	}
}

// HeldLocks returns the held locks sorted by name and token.
func (s *LockSet) HeldLocks() []HeldLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	locks := []HeldLock{}
	for key, tokens := range s.held {
		for _, t := range tokens {
			locks = append(locks, HeldLock{Key: key, Token: t})
		}
	}
	slices.SortFunc(locks, func(a, b HeldLock) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return locks
}

func (s *LockSet) add(key string, token int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[string][]int64)
	}
	tokens := s.held[key]
	i, found := slices.BinarySearch(tokens, token)
	if !found { // re-entry reports the same token again
		s.held[key] = slices.Insert(tokens, i, token)
	}
}

func (s *LockSet) removeOldest(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tokens := s.held[key]
	if len(tokens) <= 1 {
		delete(s.held, key)
		return
	}
	s.held[key] = tokens[1:]
}

// lockName returns the name inside the braces of a Redis lock key ("stockguard:lock:{item:1}"
// -> "item:1"), or key itself when it has none.
func lockName(key string) string {
	i, j := strings.IndexByte(key, '{'), strings.LastIndexByte(key, '}')
	if i >= 0 && j > i {
		return key[i+1 : j]
	}
	return key
}

// JoinHooks returns hooks that call each of hs in order; nil fields are skipped.
func JoinHooks(hs ...locking.Hooks) locking.Hooks {
	var j locking.Hooks
	for _, h := range hs {
		j.Acquired = joinAcquired(j.Acquired, h.Acquired)
		j.Renewed = join1(j.Renewed, h.Renewed)
		j.Lost = join2(j.Lost, h.Lost)
		j.Released = join2(j.Released, h.Released)
	}
	return j
}

func joinAcquired(a, b func(string, int64, time.Duration)) func(string, int64, time.Duration) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(k string, t int64, d time.Duration) { a(k, t, d); b(k, t, d) }
}

func join1(a, b func(string)) func(string) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(k string) { a(k); b(k) }
}

func join2[T any](a, b func(string, T)) func(string, T) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(k string, v T) { a(k, v); b(k, v) }
}
