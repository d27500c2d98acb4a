//go:build !nodemo

package lab

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

// Event is one line of GET /api/events: something that happened to an item lock or a
// purchase in this process. Zero fields are left out.
type Event struct {
	Seq       int64   `json:"seq"`
	Time      float64 `json:"t"`   // Unix time in milliseconds
	PID       int     `json:"pid"` // the process (instance) it happened in
	Kind      string  `json:"kind"`
	Item      int64   `json:"item,omitempty"`
	Lock      string  `json:"lock,omitempty"` // a pitfall lock's strategy (its own lock); "": the item's real lock
	Token     int64   `json:"token,omitempty"`
	Seen      int64   `json:"seen,omitempty"` // fence_refused: the token the database had seen
	LeaseMS   float64 `json:"lease_ms,omitempty"`
	WaitedMS  float64 `json:"waited_ms,omitempty"`
	HeldMS    float64 `json:"held_ms,omitempty"`
	StallMS   float64 `json:"stall_ms,omitempty"`
	Strategy  string  `json:"strategy,omitempty"`
	Quantity  int     `json:"quantity,omitempty"`
	OrderID   int64   `json:"order_id,omitempty"`
	Remaining *int    `json:"remaining,omitempty"`
	Message   string  `json:"message,omitempty"`
	Missed    int64   `json:"missed,omitempty"` // events this subscriber missed before this one
}

// Lock event kinds (the purchase kinds are inventory's Event* constants, and EventStall).
const (
	EventHello    = "hello" // first event of every stream: the process and its lease
	EventAcquired = "acquire"
	EventRenewed  = "renew"
	EventReleased = "release"
	EventLost     = "lost"
	// EventCrash: the crash fault's setnx-expire holder died between SETNX and EXPIRE; its
	// key stays, without a TTL (Lock names the pitfall lock).
	EventCrash = "crash"
)

// Events is what the storefront feeds it with.
var (
	_ inventory.LockObserver = (*Events)(nil)
	_ inventory.LockObserver = (*LockScope)(nil)
	_ inventory.Observer     = (*Events)(nil)
)

// subscriberBuffer is how many events one stream may lag behind before it misses some (a
// burst of the lab's 200 buyers makes about five events each; a page drains its stream as
// fast as they come), and maxStreams how many streams one process serves at once: each costs
// its buffer, a goroutine and the connection's buffers, so past the cap a stream is refused
// (429 overloaded) rather than growing the process without bound.
const (
	subscriberBuffer = 256
	maxStreams       = 32
)

// Events collects the lock and purchase events of this process and streams them to the
// subscribers of GET /api/events. The storefront feeds it (Storefront wires it): the lock
// clients' hooks through a LockScope each (Scope), Observe as the inventory service's
// Observer. The zero value is not usable: use NewEvents. Safe for concurrent use; the methods
// never block. It is an inventory.LockObserver itself (one scope of its own, for a process
// with one lock client) and an inventory.Observer.
type Events struct {
	pid   int
	lease time.Duration
	own   *LockScope

	mu     sync.Mutex
	seq    int64
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	ch     chan Event
	missed int64 // guarded by Events.mu
}

// NewEvents returns an event hub; lease is the item locks' lease, sent with every acquire and
// renew so a page can draw the lease.
func NewEvents(lease time.Duration) *Events {
	e := &Events{pid: os.Getpid(), lease: lease, subs: map[*subscriber]struct{}{}}
	e.own = e.Scope()
	return e
}

// LockScope tells the hub the events of one lock client's locks (an inventory.LockObserver).
// The lock hooks name no token on release, loss and renewal: a scope keeps the tokens its
// client holds, by item, and tells a release or a loss for the oldest hold of the item (the
// one being lost, if two), a renewal for the newest. One scope a client: the stall fault's
// client (no watchdog) and the storefront's lock client each hold tokens of the same items,
// and a release of one must not be told with the other's token.
type LockScope struct {
	e    *Events
	held map[int64][]int64 // item -> tokens this client holds, ascending; guarded by e.mu
}

// Scope returns a new scope of the hub, for one lock client's hooks.
func (e *Events) Scope() *LockScope { return &LockScope{e: e, held: map[int64][]int64{}} }

// LockAcquired is the lock client's Acquired hook.
func (l *LockScope) LockAcquired(key string, token int64, waited time.Duration) {
	item, ok := inventory.ItemOfLock(key)
	if !ok {
		return
	}
	l.e.mu.Lock()
	l.held[item] = insertSorted(l.held[item], token)
	l.e.mu.Unlock()
	l.e.publish(Event{Kind: EventAcquired, Item: item, Token: token, LeaseMS: ms(l.e.lease), WaitedMS: ms(waited)})
}

// LockRenewed is the lock client's Renewed hook (told for the newest hold of the item).
func (l *LockScope) LockRenewed(key string) {
	if item, ok := inventory.ItemOfLock(key); ok {
		l.e.publish(Event{Kind: EventRenewed, Item: item, Token: l.token(item, false, false), LeaseMS: ms(l.e.lease)})
	}
}

// LockReleased is the lock client's Released hook (told for the oldest hold of the item).
func (l *LockScope) LockReleased(key string, held time.Duration) {
	if item, ok := inventory.ItemOfLock(key); ok {
		l.e.publish(Event{Kind: EventReleased, Item: item, Token: l.token(item, true, true), HeldMS: ms(held)})
	}
}

// LockLost is the lock client's Lost hook (told for the oldest hold of the item).
func (l *LockScope) LockLost(key string, err error) {
	if item, ok := inventory.ItemOfLock(key); ok {
		l.e.publish(Event{Kind: EventLost, Item: item, Token: l.token(item, true, true), Message: err.Error()})
	}
}

// LockAcquired, LockRenewed, LockReleased and LockLost are the hub's own scope's (LockScope).
func (e *Events) LockAcquired(key string, token int64, waited time.Duration) {
	e.own.LockAcquired(key, token, waited)
}

// LockRenewed: see LockAcquired.
func (e *Events) LockRenewed(key string) { e.own.LockRenewed(key) }

// LockReleased: see LockAcquired.
func (e *Events) LockReleased(key string, held time.Duration) { e.own.LockReleased(key, held) }

// LockLost: see LockAcquired.
func (e *Events) LockLost(key string, err error) { e.own.LockLost(key, err) }

// Observe is the inventory service's Observer.
func (e *Events) Observe(ev inventory.Event) {
	out := Event{Kind: ev.Kind, Item: ev.ItemID, Strategy: ev.Strategy, Quantity: ev.Quantity,
		Token: ev.Token, Seen: ev.Seen, OrderID: ev.OrderID}
	if ev.Kind == inventory.EventOrder {
		out.Remaining = &ev.Remaining
	}
	if ev.Err != nil {
		out.Message = ev.Err.Error()
	}
	e.publish(out)
}

// Close ends every stream and refuses new ones (called when shutdown begins, so that open
// streams do not hold the graceful shutdown up).
func (e *Events) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	for s := range e.subs {
		close(s.ch)
		delete(e.subs, s)
	}
}

// token returns the oldest (or newest) token the scope's client holds for item, removing it
// when remove is set; 0 when none is known.
func (l *LockScope) token(item int64, oldest, remove bool) int64 {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	tokens := l.held[item]
	if len(tokens) == 0 {
		return 0
	}
	i := len(tokens) - 1
	if oldest {
		i = 0
	}
	t := tokens[i]
	if remove {
		if tokens = append(tokens[:i:i], tokens[i+1:]...); len(tokens) == 0 {
			delete(l.held, item)
		} else {
			l.held[item] = tokens
		}
	}
	return t
}

func insertSorted(tokens []int64, t int64) []int64 {
	i := len(tokens)
	for i > 0 && tokens[i-1] > t {
		i--
	}
	if i > 0 && tokens[i-1] == t {
		return tokens // re-entry reports the same token again
	}
	return append(tokens[:i:i], append([]int64{t}, tokens[i:]...)...)
}

// publish stamps ev and hands it to every subscriber without waiting: a subscriber whose
// buffer is full misses it, and its next event says how many it missed.
func (e *Events) publish(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.seq++
	ev.Seq, ev.PID, ev.Time = e.seq, e.pid, ms(time.Duration(time.Now().UnixNano()))
	for s := range e.subs {
		out := ev
		out.Missed = s.missed
		select {
		case s.ch <- out:
			s.missed = 0
		default:
			s.missed++
		}
	}
}

// subscribe returns a new stream, whose channel is closed by Close: errShuttingDown after
// Close, errTooManyStreams when maxStreams are open.
func (e *Events) subscribe() (*subscriber, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return nil, errShuttingDown
	case len(e.subs) >= maxStreams:
		return nil, errTooManyStreams
	}
	s := &subscriber{ch: make(chan Event, subscriberBuffer)}
	e.subs[s] = struct{}{}
	return s, nil
}

func (e *Events) unsubscribe(s *subscriber) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.subs[s]; ok {
		delete(e.subs, s)
		close(s.ch)
	}
}

func (e *Events) hello() Event {
	return Event{Kind: EventHello, PID: e.pid, LeaseMS: ms(e.lease), Time: ms(time.Duration(time.Now().UnixNano()))}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// heartbeat is how often an idle stream sends a comment line, so that a client or proxy
// that went away is noticed.
const heartbeat = 15 * time.Second

// Errors of a new stream: the hub is closed (shutdown began), or maxStreams are open.
var (
	errShuttingDown = &handlers.Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "the server is shutting down", RetryAfter: true}
	errTooManyStreams = &handlers.Error{Status: http.StatusTooManyRequests, Code: "overloaded",
		Message: fmt.Sprintf("too many open event streams: at most %d per process (close a lab page or two)", maxStreams), RetryAfter: true}
)

// Serve answers GET /api/events with a server-sent event stream: one JSON Event per "data:"
// line, a "hello" first. The stream clears the server's write deadline
// (http.Server.WriteTimeout would otherwise cut it) and ends when the client goes, or when
// the hub is closed at shutdown.
func (e *Events) Serve(c *gin.Context) {
	sub, err := e.subscribe()
	if err != nil {
		handlers.WriteError(c, err)
		return
	}
	defer e.unsubscribe(sub)
	rc := http.NewResponseController(c.Writer)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		handlers.RequestLogger(c).Warn("event stream: cannot clear the write deadline", "err", err)
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)

	send := func(ev Event) error {
		data, _ := json.Marshal(ev) // an Event always marshals
		if _, err := c.Writer.Write(append(append([]byte("data: "), data...), '\n', '\n')); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send(e.hello()) != nil {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-c.Request.Context().Done():
			return
		case ev, ok := <-sub.ch:
			if !ok || send(ev) != nil {
				return
			}
		case <-tick.C:
			if _, err := c.Writer.Write([]byte(": ping\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
