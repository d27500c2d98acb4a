package handlers

import (
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

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

// Lock event kinds (the purchase kinds are inventory's Event* constants).
const (
	EventHello    = "hello" // first event of every stream: the process and its lease
	EventAcquired = "acquire"
	EventRenewed  = "renew"
	EventReleased = "release"
	EventLost     = "lost"
)

// Events is what main feeds it with.
var (
	_ inventory.LockObserver = (*Events)(nil)
	_ inventory.Observer     = (*Events)(nil)
)

// subscriberBuffer is how many events one stream may lag behind before it misses some.
const subscriberBuffer = 4096

// Events collects the lock and purchase events of this process and streams them to the
// subscribers of GET /api/events. main feeds it: its Lock* methods from the lock client's
// hooks, Observe as the inventory service's Observer. The zero value is not usable: use
// NewEvents. Safe for concurrent use; the methods never block. It is an inventory.LockObserver
// (inventory.ObserverHooks) and an inventory.Observer.
type Events struct {
	pid   int
	lease time.Duration

	mu     sync.Mutex
	seq    int64
	subs   map[*subscriber]struct{}
	held   map[int64][]int64 // item -> tokens this process holds, ascending (for release/lost)
	closed bool
}

type subscriber struct {
	ch     chan Event
	missed int64 // guarded by Events.mu
}

// NewEvents returns an event hub; lease is the item locks' lease, sent with every acquire and
// renew so a page can draw the lease.
func NewEvents(lease time.Duration) *Events {
	return &Events{pid: os.Getpid(), lease: lease, subs: map[*subscriber]struct{}{}, held: map[int64][]int64{}}
}

// LockAcquired is the lock client's Acquired hook.
func (e *Events) LockAcquired(key string, token int64, waited time.Duration) {
	item, ok := inventory.ItemOfLock(key)
	if !ok {
		return
	}
	e.mu.Lock()
	e.held[item] = insertSorted(e.held[item], token)
	e.mu.Unlock()
	e.publish(Event{Kind: EventAcquired, Item: item, Token: token, LeaseMS: ms(e.lease), WaitedMS: ms(waited)})
}

// LockRenewed is the lock client's Renewed hook. The hook names no token: the renewal is
// told for the newest hold of the item (an older one is the one being lost, if any).
func (e *Events) LockRenewed(key string) {
	if item, ok := inventory.ItemOfLock(key); ok {
		e.publish(Event{Kind: EventRenewed, Item: item, Token: e.token(item, false, false), LeaseMS: ms(e.lease)})
	}
}

// LockReleased is the lock client's Released hook (told for the oldest hold of the item).
func (e *Events) LockReleased(key string, held time.Duration) {
	if item, ok := inventory.ItemOfLock(key); ok {
		e.publish(Event{Kind: EventReleased, Item: item, Token: e.token(item, true, true), HeldMS: ms(held)})
	}
}

// LockLost is the lock client's Lost hook (told for the oldest hold of the item).
func (e *Events) LockLost(key string, err error) {
	if item, ok := inventory.ItemOfLock(key); ok {
		e.publish(Event{Kind: EventLost, Item: item, Token: e.token(item, true, true), Message: err.Error()})
	}
}

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

// Close ends every stream and refuses new ones (main calls it when shutdown begins, so that
// open streams do not hold the graceful shutdown up).
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

// token returns the oldest (or newest) token this process holds for item, removing it when
// remove is set; 0 when none is known.
func (e *Events) token(item int64, oldest, remove bool) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	tokens := e.held[item]
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
			delete(e.held, item)
		} else {
			e.held[item] = tokens
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

// subscribe returns a new stream, whose channel is closed by Close, or nil after Close.
func (e *Events) subscribe() *subscriber {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	s := &subscriber{ch: make(chan Event, subscriberBuffer)}
	e.subs[s] = struct{}{}
	return s
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

// events answers GET /api/events (demo mode only) with a server-sent event stream: one JSON
// Event per "data:" line, a "hello" first. The stream clears the server's write deadline
// (http.Server.WriteTimeout would otherwise cut it) and ends when the client goes, or when
// the hub is closed at shutdown.
func (s *server) events(c *gin.Context) {
	if !s.demo || s.hub == nil {
		writeError(c, errDebugDisabled)
		return
	}
	sub := s.hub.subscribe()
	if sub == nil {
		writeError(c, errShuttingDown)
		return
	}
	defer s.hub.unsubscribe(sub)
	rc := http.NewResponseController(c.Writer)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		requestLogger(c).Warn("event stream: cannot clear the write deadline", "err", err)
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
	if send(s.hub.hello()) != nil {
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
