package locking

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// A hold that hands a context to each of many callers keeps only the contexts still running:
// those whose parent ended (the request answered) leave it. The one still running is cancelled
// at the release, as before.
func TestLockContextsOfEndedCallersAreDropped(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, srv, nil)
	l, err := c.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	m, err := c.ObtainMany(ctx, []KeyFloor{{Key: uniqueKey(t)}, {Key: uniqueKey(t)}})
	require.NoError(t, err)

	for range 2000 {
		caller, done := context.WithCancel(ctx)
		_ = l.Context(caller)
		_ = m.Context(caller)
		done() // the caller's request was answered
	}
	running := l.Context(ctx)
	runningMulti := m.Context(ctx)
	live := func() (int, int) {
		l.h.mu.Lock()
		nl := l.contexts.live()
		l.h.mu.Unlock()
		m.mu.Lock()
		defer m.mu.Unlock()
		return nl, m.contexts.live()
	}
	require.Eventually(t, func() bool {
		nl, nm := live()
		return nl == 1 && nm == 1
	}, 5*time.Second, time.Millisecond, "only the running contexts are kept")

	require.NoError(t, l.Release(ctx))
	require.NoError(t, m.Release(ctx))
	assert.ErrorIs(t, context.Cause(running), ErrNotHeld, "the running context ends with the release")
	assert.ErrorIs(t, context.Cause(runningMulti), ErrNotHeld)
}

// The contexts end in the order they were handed out: the first one taken (a holder's own) is
// cancelled before a later one (a worker's), so a worker that sees its context end finds the
// holder's ended too.
func TestContextsEndInOrder(t *testing.T) {
	var mu sync.Mutex
	var set contexts
	var order []int
	for i := range 100 {
		ctx, cancel := context.WithCancelCause(context.Background())
		mu.Lock()
		set.add(&mu, ctx, func(cause error) { order = append(order, i); cancel(cause) })
		mu.Unlock()
	}
	mu.Lock()
	set.cancelAll(ErrNotHeld)
	mu.Unlock()
	require.Len(t, order, 100)
	assert.True(t, slices.IsSorted(order), "cancelled in the order handed out: %v", order)
}
