package locking

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes one Redis subscription per Client to the goroutines waiting for locks.
// It starts with the first waiter and stops with Client.Close.
//
// A release message wakes one waiter of its channel, not all (no thundering herd): waiters of
// one key are interchangeable, and the woken one either takes the lock or finds it taken by a
// holder that will publish again. A woken waiter that leaves without trying passes the
// wake-up on. A subscription error (connection lost, messages possibly missed) wakes all.
type notifier struct {
	rdb         redis.UniversalClient
	log         *slog.Logger
	callTimeout time.Duration

	mu       sync.Mutex
	ps       *redis.PubSub
	channels map[string]*channelState
	closed   bool
	quit     chan struct{} // closed by close
	done     chan struct{} // closed when the receive goroutine ends

	// Counters read by tests: release messages received, receive errors (which wake all),
	// and waits ended by a message or by the timer.
	messages, receiveErrors      atomic.Int64
	wokenByMessage, wokenByTimer atomic.Int64
}

type channelState struct {
	waiters   []*waiter     // FIFO: the longest waiting is woken first
	confirmed bool          // Redis acknowledged SUBSCRIBE
	ready     chan struct{} // closed on confirmation
	idleSince time.Time     // when the last waiter left (zero while waited on)
}

// waiter is one goroutine waiting on a channel.
type waiter struct {
	channel string
	wake    chan struct{} // buffered 1: a wake-up is never lost between attempt and wait
	ready   <-chan struct{}
	pending bool // woken by a message and has not tried since (guarded by notifier.mu)
}

const (
	idleUnsubscribe = 5 * time.Second  // a channel nobody waits on is dropped after this
	receivePoll     = time.Second      // receive timeout: the sweep and health-check period
	healthEvery     = 30 * time.Second // PING an idle subscription this often
)

var errClosed = errors.New("locking: client closed")

func newNotifier(rdb redis.UniversalClient, log *slog.Logger, callTimeout time.Duration) *notifier {
	return &notifier{rdb: rdb, log: log, callTimeout: callTimeout,
		channels: map[string]*channelState{}, quit: make(chan struct{})}
}

// register adds a waiter on channel, subscribing if needed. The caller must call unregister.
// The returned waiter's ready channel closes when the subscription is confirmed: a release
// published after that is seen.
func (n *notifier) register(ctx context.Context, channel string) (*waiter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errClosed
	}
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(context.WithoutCancel(ctx))
		n.done = make(chan struct{})
		go n.receive(n.ps)
	}
	st := n.channels[channel]
	if st == nil {
		st = &channelState{ready: make(chan struct{})}
		n.channels[channel] = st
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.callTimeout)
		if err := n.ps.Subscribe(cctx, channel); err != nil {
			// go-redis keeps the channel and subscribes again when it reconnects; until
			// then the waiter relies on its timer.
			n.log.Warn("locking: subscribe failed", "channel", channel, "err", err)
		}
		cancel()
	}
	st.idleSince = time.Time{}
	w := &waiter{channel: channel, wake: make(chan struct{}, 1), ready: st.ready}
	st.waiters = append(st.waiters, w)
	return w, nil
}

// tried records that w made an attempt after its last wake-up.
func (n *notifier) tried(w *waiter) {
	n.mu.Lock()
	w.pending = false
	n.mu.Unlock()
}

// unregister removes w. A waiter that was woken and leaves without having tried since (its
// context ended) hands the wake-up to the next waiter.
func (n *notifier) unregister(w *waiter, acquired bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.channels[w.channel]
	if st == nil {
		return
	}
	for i, x := range st.waiters {
		if x == w {
			st.waiters = append(st.waiters[:i], st.waiters[i+1:]...)
			break
		}
	}
	if w.pending && !acquired {
		n.wakeOneLocked(st)
	}
	if len(st.waiters) == 0 {
		st.idleSince = time.Now()
	}
}

func (n *notifier) wakeOneLocked(st *channelState) {
	for _, w := range st.waiters {
		if !w.pending {
			w.pending = true
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

func (n *notifier) wakeAllLocked() {
	for _, st := range n.channels {
		for _, w := range st.waiters {
			w.pending = true
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// close stops the receive goroutine and waits for it. Waiters still registered keep
// waiting on their timers.
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.quit)
	ps, done := n.ps, n.done
	n.wakeAllLocked()
	n.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}
