package locking

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes one Redis subscription per Client to the goroutines waiting for locks.
// It starts with the first waiter and stops with Client.Close.
//
// The waiters of one channel form a FIFO queue. A release message wakes one waiter, the
// longest waiting that is not already awake, not all (no thundering herd): waiters of one key
// are interchangeable, and the woken one either takes the lock or finds it taken by a holder
// that will publish again. Only the head of the queue tries on its own (at registration and
// when the holder's lease runs out); the others wait for a message, so a newcomer of this
// Client does not overtake its waiters (see Client.waitLoop). A woken waiter, or the head,
// that leaves without the lock passes the wake-up on. A subscription error (connection
// lost, messages possibly missed) wakes all.
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

	// subMu orders SUBSCRIBE and UNSUBSCRIBE commands (taken before mu, never inside it), so
	// that a channel dropped by sweep and wanted again is unsubscribed before it is
	// subscribed anew. The calls run outside mu: go-redis may hold the subscription's lock
	// while it redials, and that must not stall the waiters' bookkeeping.
	subMu sync.Mutex
	subs  sync.WaitGroup // subscribe goroutines, waited for by close

	// Counters read by tests: release messages received, receive errors (which wake all),
	// and waits ended by a message or by the timer.
	messages, receiveErrors      atomic.Int64
	wokenByMessage, wokenByTimer atomic.Int64
	sleeping                     atomic.Int64 // waiters asleep between attempts
	resubscribes                 atomic.Int64 // subscriptions replaced after an unanswered PING

	healthEvery time.Duration // PING a subscription quiet for this long (tests shorten it)
}

type channelState struct {
	waiters   []*waiter     // FIFO: the longest waiting is woken first
	confirmed bool          // Redis acknowledged SUBSCRIBE
	ready     chan struct{} // closed on confirmation
	idleSince time.Time     // when the last waiter left (zero while waited on)
	// sent: SUBSCRIBE was sent on the current subscription (set under subMu and mu).
	// dropOnConfirm: drop found the SUBSCRIBE unconfirmed; receive drops the channel once
	// it is confirmed, unless a waiter came meanwhile.
	sent, dropOnConfirm bool
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
	healthEvery     = 30 * time.Second // default: PING an idle subscription this often
)

var errClosed = errors.New("locking: client closed")

func newNotifier(rdb redis.UniversalClient, log *slog.Logger, callTimeout time.Duration) *notifier {
	return &notifier{rdb: rdb, log: log, callTimeout: callTimeout,
		channels: map[string]*channelState{}, quit: make(chan struct{}), healthEvery: healthEvery}
}

// queued reports whether channel has waiters: an Obtain of this Client then queues behind
// them instead of trying first.
func (n *notifier) queued(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.channels[channel]
	return st != nil && len(st.waiters) > 0
}

// register adds a waiter at the tail of channel's queue, subscribing if needed, and reports
// whether it is the head. The caller must call unregister. The waiter's ready channel closes
// when the subscription is confirmed: a release published after that is seen.
func (n *notifier) register(ctx context.Context, channel string) (w *waiter, head bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, false, errClosed
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
		// Subscribe in the background: the waiter waits for st.ready, bounded by CallTimeout.
		n.subs.Add(1)
		go n.subscribe(n.ps, channel, st)
	}
	st.idleSince, st.dropOnConfirm = time.Time{}, false
	w = &waiter{channel: channel, wake: make(chan struct{}, 1), ready: st.ready}
	st.waiters = append(st.waiters, w)
	return w, len(st.waiters) == 1, nil
}

// subscribe sends SUBSCRIBE for channel on ps; the receive goroutine sees the
// confirmation. It sends nothing if st was dropped or ps replaced meanwhile.
func (n *notifier) subscribe(ps *redis.PubSub, channel string, st *channelState) {
	defer n.subs.Done()
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	if n.channels[channel] != st || n.ps != ps {
		n.mu.Unlock()
		return
	}
	st.sent = true
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.callTimeout)
	defer cancel()
	if err := ps.Subscribe(ctx, channel); err != nil && !n.isClosed() {
		// go-redis keeps the channel and subscribes again when it reconnects; until then
		// the waiters rely on their timers.
		n.log.Warn("locking: subscribe failed", "channel", channel, "err", err)
	}
}

// tried records that w made an attempt after its last wake-up.
func (n *notifier) tried(w *waiter) {
	n.mu.Lock()
	w.pending = false
	n.mu.Unlock()
}

// unregister removes w. A waiter that leaves without the lock (its context or wait limit
// ended) hands on its wake-up if it was woken and has not tried since, and its role if it was
// the head: the next waiter is woken to try.
func (n *notifier) unregister(w *waiter, acquired bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.channels[w.channel]
	if st == nil {
		return
	}
	head := false
	for i, x := range st.waiters {
		if x == w {
			head = i == 0
			st.waiters = slices.Delete(st.waiters, i, i+1)
			break
		}
	}
	if !acquired && (w.pending || head) {
		n.wakeOneLocked(st)
	}
	if len(st.waiters) == 0 {
		st.idleSince = time.Now()
	}
}

// drop unsubscribes channel at once if nobody waits on it: for a fair waiter's own channel,
// which no later waiter uses (the idle sweep would keep it for a while, and under steady
// traffic for good).
//
// It follows the notifier's rule (see notifier.subMu): the state is deleted under mu, and
// UNSUBSCRIBE is sent outside mu, under subMu, so that a redial inside go-redis stalls no
// waiter and no UNSUBSCRIBE overtakes a pending SUBSCRIBE of the channel. A SUBSCRIBE not
// sent yet is called off (subscribe skips a deleted state); one sent but not yet confirmed
// is left to run, and the channel is dropped when its confirmation arrives (receive), so
// that a stale confirmation can never be taken for a later subscription's.
func (n *notifier) drop(channel string) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	st, ps := n.channels[channel], n.ps
	if st == nil || len(st.waiters) > 0 || ps == nil {
		n.mu.Unlock()
		return
	}
	if st.sent && !st.confirmed {
		st.dropOnConfirm = true
		n.mu.Unlock()
		return
	}
	delete(n.channels, channel)
	n.mu.Unlock()
	if !st.sent {
		return // its SUBSCRIBE was never sent, and now never will be
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.callTimeout)
	defer cancel()
	if err := ps.Unsubscribe(ctx, channel); err != nil {
		n.log.Debug("locking: unsubscribe failed", "channel", channel, "err", err)
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
	n.subs.Wait()
}
