package locking

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// receive is the notifier's one goroutine: it reads the shared subscription until close,
// wakes waiters on release messages, confirms subscriptions, drops idle channels and pings
// a quiet connection.
func (n *notifier) receive(ps *redis.PubSub) {
	defer close(n.done)
	ctx := context.Background()
	lastHeard := time.Now()
	var pinged time.Time // when an unanswered PING was sent
	failures := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, receivePoll)
		if err != nil {
			if n.isClosed() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				n.sweep(ps)
				switch {
				case !pinged.IsZero() && time.Since(pinged) > 2*max(n.callTimeout, receivePoll):
					// No PONG: the connection is dead without having said so (no RST).
					if ps = n.resubscribe(ps); ps == nil {
						return
					}
					pinged, lastHeard = time.Time{}, time.Now()
				case pinged.IsZero() && time.Since(lastHeard) > n.healthEvery:
					n.ping(ps)
					pinged = time.Now()
				}
				continue
			}
			// The connection broke: go-redis reconnects and subscribes again on the next
			// receive. Messages may have been missed meanwhile: every waiter tries again.
			n.mu.Lock()
			for _, st := range n.channels {
				if st.confirmed {
					st.confirmed, st.ready = false, make(chan struct{})
				}
			}
			n.wakeAllLocked()
			n.mu.Unlock()
			n.receiveErrors.Add(1)
			failures++
			n.log.Debug("locking: subscription receive failed", "err", err)
			if !n.sleep(min(time.Duration(failures)*50*time.Millisecond, time.Second)) {
				return
			}
			continue
		}
		failures = 0
		lastHeard, pinged = time.Now(), time.Time{}
		switch m := msg.(type) {
		case *redis.Message:
			n.mu.Lock()
			if st := n.channels[m.Channel]; st != nil {
				n.wakeOneLocked(st)
			}
			n.mu.Unlock()
			n.messages.Add(1)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.mu.Lock()
				if st := n.channels[m.Channel]; st != nil && !st.confirmed {
					st.confirmed = true
					select {
					case <-st.ready:
					default:
						close(st.ready)
					}
					if st.dropOnConfirm && len(st.waiters) == 0 && !n.closed {
						// drop left it to this confirmation (not from here: drop
						// takes subMu, and this goroutine must never wait for it).
						n.subs.Add(1)
						go func() {
							defer n.subs.Done()
							n.drop(m.Channel)
						}()
					}
				}
				n.mu.Unlock()
			}
		}
	}
}

func (n *notifier) isClosed() bool {
	select {
	case <-n.quit:
		return true
	default:
		return false
	}
}

// sleep waits d or until close; it reports false on close.
func (n *notifier) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.quit:
		return false
	}
}

// sweep unsubscribes channels nobody has waited on for idleUnsubscribe. Only confirmed
// channels are dropped, so the replies of one connection stay in order: a later SUBSCRIBE
// of the same channel is confirmed after this UNSUBSCRIBE.
func (n *notifier) sweep(ps *redis.PubSub) {
	n.subMu.Lock() // held across UNSUBSCRIBE so no SUBSCRIBE of the same channel overtakes it
	defer n.subMu.Unlock()
	n.mu.Lock()
	var idle []string
	for ch, st := range n.channels {
		if len(st.waiters) == 0 && st.confirmed && !st.idleSince.IsZero() &&
			time.Since(st.idleSince) > idleUnsubscribe {
			idle = append(idle, ch)
			delete(n.channels, ch)
		}
	}
	n.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.callTimeout)
	defer cancel()
	if err := ps.Unsubscribe(ctx, idle...); err != nil {
		n.log.Debug("locking: unsubscribe failed", "err", err)
	}
}

func (n *notifier) ping(ps *redis.PubSub) {
	ctx, cancel := context.WithTimeout(context.Background(), n.callTimeout)
	defer cancel()
	_ = ps.Ping(ctx) // a failure surfaces as a receive error, which reconnects
}

// resubscribe replaces a silently dead subscription with a new one on every channel, and
// wakes all waiters (messages may have been missed). It returns the new subscription, or nil
// after close.
func (n *notifier) resubscribe(old *redis.PubSub) *redis.PubSub {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	ps := n.rdb.Subscribe(context.Background())
	n.ps = ps
	for ch, st := range n.channels {
		if st.confirmed {
			st.confirmed, st.ready = false, make(chan struct{})
		}
		st.sent = false
		n.subs.Add(1)
		go n.subscribe(ps, ch, st)
	}
	n.wakeAllLocked()
	n.mu.Unlock()
	n.resubscribes.Add(1)
	n.log.Warn("locking: subscription unresponsive, reconnecting")
	_ = old.Close()
	return ps
}
