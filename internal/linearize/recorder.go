package linearize

import (
	"sync"
	"time"
)

// Operation is one entry of a history: an operation, when it was invoked and when it
// completed (offsets on one monotonic clock), and its outcome. An operation that never
// completed (Ended false: its answer never came) is checked as Indeterminate whatever its
// Outcome says, and its Return is ignored.
type Operation struct {
	Op      Op
	Outcome Outcome
	Call    time.Duration // when the request was sent
	Return  time.Duration // when its answer arrived (or the client gave up on it)
	Ended   bool
}

// Recorder records a history. It is safe for concurrent use: every client goroutine calls
// Begin just before it sends a request and End (or Unknown) on the handle once it has the
// answer. The zero value is not usable: call NewRecorder.
type Recorder struct {
	start time.Time // the clock's origin; time.Since reads the monotonic clock

	mu  sync.Mutex
	ops []Operation
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now()}
}

// Call is the handle of one operation in flight, returned by Begin.
type Call struct {
	r    *Recorder
	i    int
	once sync.Once
}

// Begin records that op is being invoked now, and returns its handle. A Call that is never
// ended stays in flight: Check treats it as Indeterminate.
func (r *Recorder) Begin(op Op) *Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, Operation{Op: op, Call: time.Since(r.start)})
	return &Call{r: r, i: len(r.ops) - 1}
}

// End records that the operation completed now with out. Only the first End or Unknown of a
// Call counts; later ones do nothing.
func (c *Call) End(out Outcome) {
	c.once.Do(func() {
		now := time.Since(c.r.start)
		c.r.mu.Lock()
		defer c.r.mu.Unlock()
		o := &c.r.ops[c.i]
		o.Outcome, o.Return, o.Ended = out, now, true
	})
}

// Unknown records that the operation ended now without a known outcome (cause: "timeout",
// "transport", "500 internal", ...): End(Indeterminate{Cause: cause}).
func (c *Call) Unknown(cause string) {
	c.End(Indeterminate{Cause: cause})
}

// Operations returns a copy of the history recorded so far, in the order of Begin.
func (r *Recorder) Operations() []Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Operation(nil), r.ops...)
}

// Len returns the number of operations begun so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}
