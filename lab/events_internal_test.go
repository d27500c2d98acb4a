//go:build !nodemo

package lab

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lock hooks name no token on release and loss: the hub tells the oldest hold of the
// item (the one being lost), and a renewal the newest.
func TestEventsTokens(t *testing.T) {
	e := NewEvents(time.Second)
	s, err := e.subscribe()
	require.NoError(t, err)
	e.LockAcquired("item:4", 7, 0)
	e.LockAcquired("item:4", 8, time.Millisecond)
	e.LockRenewed("item:4")
	e.LockLost("item:4", errors.New("lease over"))
	e.LockReleased("item:4", time.Second)
	e.LockAcquired("not-an-item", 1, 0)
	var got []Event
	for range 5 {
		got = append(got, <-s.ch)
	}
	kinds := []string{EventAcquired, EventAcquired, EventRenewed, EventLost, EventReleased}
	tokens := []int64{7, 8, 8, 7, 8}
	for i, ev := range got {
		assert.Equal(t, kinds[i], ev.Kind)
		assert.EqualValues(t, 4, ev.Item)
		assert.Equal(t, tokens[i], ev.Token, ev.Kind)
		assert.EqualValues(t, i+1, ev.Seq)
	}
	assert.Empty(t, s.ch, "a key that is no item lock is not told")
	assert.Empty(t, e.own.held)
}

// Each lock client has its scope: a release by one client is told with its own token, though
// another client of the same process holds an older token of the item (the stall fault's
// client and the storefront's).
func TestEventsScopes(t *testing.T) {
	e := NewEvents(time.Second)
	s, err := e.subscribe()
	require.NoError(t, err)
	stall, main := e.Scope(), e.Scope()
	stall.LockAcquired("item:4", 5, 0)
	main.LockAcquired("item:4", 8, 0)
	main.LockReleased("item:4", time.Second)
	stall.LockLost("item:4", errors.New("lease over"))
	var got []Event
	for range 4 {
		got = append(got, <-s.ch)
	}
	assert.Equal(t, []int64{5, 8, 8, 5}, []int64{got[0].Token, got[1].Token, got[2].Token, got[3].Token})
	assert.Equal(t, EventReleased, got[2].Kind)
	assert.Equal(t, EventLost, got[3].Kind)
	assert.Empty(t, stall.held)
	assert.Empty(t, main.held)
}

// A subscriber that falls behind misses events without blocking anyone, and is told.
func TestEventsMissed(t *testing.T) {
	e := NewEvents(time.Second)
	s, err := e.subscribe()
	require.NoError(t, err)
	for range subscriberBuffer + 3 {
		e.LockRenewed("item:1")
	}
	for range subscriberBuffer {
		<-s.ch
	}
	e.LockRenewed("item:1")
	ev := <-s.ch
	assert.EqualValues(t, 3, ev.Missed)
	e.Close()
	_, open := <-s.ch
	require.False(t, open)
	_, err = e.subscribe()
	assert.ErrorIs(t, err, errShuttingDown)
	e.LockRenewed("item:1") // after Close: nothing, no panic
}
