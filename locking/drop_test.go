package locking

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A fair waiter's channel is dropped (notifier.drop) when the waiter leaves. drop must follow
// the notifier's rule: UNSUBSCRIBE under subMu, outside mu, so that it neither overtakes a
// pending SUBSCRIBE (which would leave the channel subscribed for good, with no state left
// for the sweep to find) nor stalls the waiters' bookkeeping meanwhile.
func TestDropNeverOvertakesAPendingSubscribe(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	c := newClient(t, nil, nil)
	n := c.notify
	ctx := ctxT(t, 20*time.Second)
	prefix := uniqueKey(t)
	for i := range 20 {
		ch := fmt.Sprintf("%s:turn:%d", prefix, i)
		n.subMu.Lock()                   // a SUBSCRIBE or UNSUBSCRIBE of another channel is in flight
		w, _, err := n.register(ctx, ch) // this channel's SUBSCRIBE is pending behind it
		require.NoError(t, err)
		n.unregister(w, false) // the waiter gives up before the SUBSCRIBE is sent
		dropped := make(chan struct{})
		go func() {
			n.drop(ch)
			close(dropped)
		}()
		queued := make(chan bool)
		go func() { queued <- n.queued(ch) }()
		select {
		case <-queued:
		case <-time.After(time.Second):
			t.Fatal("drop holds the notifier's mutex while waiting to unsubscribe")
		}
		select {
		case <-dropped:
			n.subMu.Unlock()
			t.Fatal("drop unsubscribed while a SUBSCRIBE of the channel was pending")
		case <-time.After(5 * time.Millisecond):
		}
		n.subMu.Unlock()
		<-dropped
	}
	// Well before the idle sweep (idleUnsubscribe) could: nothing stays subscribed.
	require.Eventually(t, func() bool {
		chans, err := rdb.PubSubChannels(context.Background(), prefix+":turn:*").Result()
		require.NoError(t, err)
		n.mu.Lock()
		left := len(n.channels)
		n.mu.Unlock()
		return len(chans) == 0 && left == 0
	}, 2*time.Second, 10*time.Millisecond, "a dropped channel stayed subscribed")
}

// A channel dropped after its SUBSCRIBE was sent but before Redis confirmed it is
// unsubscribed once the confirmation arrives.
func TestDropOfAnUnconfirmedChannelUnsubscribesOnConfirmation(t *testing.T) {
	verifyNoLeaks(t)
	rdb := newRedis(t, nil)
	c := newClient(t, nil, nil)
	n := c.notify
	ctx := ctxT(t, 20*time.Second)
	prefix := uniqueKey(t)
	for i := range 50 {
		ch := fmt.Sprintf("%s:turn:%d", prefix, i)
		w, _, err := n.register(ctx, ch)
		require.NoError(t, err)
		n.unregister(w, false)
		n.drop(ch) // at any point of the SUBSCRIBE: pending, sent, or confirmed
	}
	require.Eventually(t, func() bool {
		chans, err := rdb.PubSubChannels(context.Background(), prefix+":turn:*").Result()
		require.NoError(t, err)
		n.mu.Lock()
		left := len(n.channels)
		n.mu.Unlock()
		return len(chans) == 0 && left == 0
	}, 2*time.Second, 10*time.Millisecond, "a dropped channel stayed subscribed")
}
