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
	assert.Empty(t, e.held)
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
