package fault

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Recording keeps, during a -chaos pause run, the hot item's events of the real lock that
// every instance tells on its GET /api/events stream (its --demo event hub, docs/DESIGN.md
// §5.5): acquisitions, renewals, releases, losses and writes. The load test sees no
// acquisition or release otherwise. Stop ends it and builds the Lanes of the report.
type Recording struct {
	hot    int64
	start  time.Time
	settle time.Duration   // how long Stop waits for the resumed holder's hold to end
	ctx    context.Context // the streams'; ends with the load test's too
	cancel context.CancelFunc
	wg     sync.WaitGroup
	hc     *http.Client

	mu     sync.Mutex
	events []InstanceEvent
	pids   []int
	missed int64
	notes  []string
	hello  chan int // each stream's instance once its hello came (or it failed)
}

// recordingWait bounds the wait for every stream's hello before the run.
const recordingWait = 2 * time.Second

// keptKinds are the events of the hot item's lock that the lanes draw.
var keptKinds = map[string]bool{"acquire": true, "renew": true, "release": true, "lost": true, "order": true, "fence_refused": true}

// Record starts recording the hot item's lock events on every instance of c's cluster, for a
// mode that draws them (pause); nil otherwise. It returns once every stream said hello (or
// failed, or recordingWait passed), so the run's first acquisition is recorded; start is the
// run's beginning, the axis's zero. Stop ends it; ctx ending ends the streams too.
func (c *Chaos) Record(ctx context.Context, hot int64, start time.Time) *Recording {
	if c.mode.Name != ChaosPause || c.cluster == nil || len(c.cluster.Instances) == 0 {
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	hc := client.NewStreamClient()
	r := &Recording{hot: hot, start: start, settle: c.lease + 500*time.Millisecond, ctx: rctx, cancel: cancel, hc: hc, pids: make([]int, len(c.cluster.Instances)),
		hello: make(chan int, len(c.cluster.Instances))}
	for i, in := range c.cluster.Instances {
		r.wg.Add(1)
		go func() { // owner: the Recording, whose Stop cancels rctx and waits
			defer r.wg.Done()
			said := false
			err := client.StreamEvents(rctx, hc, in.URL, func(e client.LabEvent) {
				if !said && e.Kind == "hello" {
					said = true
					r.mu.Lock()
					r.pids[i] = e.PID
					r.mu.Unlock()
					r.hello <- i
				}
				r.keep(i, e)
			})
			if err != nil {
				r.mu.Lock()
				r.notes = append(r.notes, fmt.Sprintf("instance %d's event stream: %v", i, err))
				r.mu.Unlock()
			}
			if !said {
				r.hello <- i
			}
		}()
	}
	t := time.NewTimer(recordingWait)
	defer t.Stop()
	for range c.cluster.Instances {
		select {
		case <-r.hello:
		case <-t.C:
			r.mu.Lock()
			r.notes = append(r.notes, fmt.Sprintf("not every event stream said hello within %s: the first holds may be missing", recordingWait))
			r.mu.Unlock()
			return r
		case <-ctx.Done():
			return r
		}
	}
	return r
}

// keep records e when it is about the hot item's real lock.
func (r *Recording) keep(instance int, e client.LabEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.missed += e.Missed
	if e.Item == r.hot && e.Lock == "" && keptKinds[e.Kind] {
		r.events = append(r.events, InstanceEvent{Instance: instance, LabEvent: e})
	}
}

// ended reports whether instance's hold of token has ended (released or lost).
func (r *Recording) ended(instance int, token int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Instance == instance && e.Token == token && (e.Kind == "release" || e.Kind == "lost") {
			return true
		}
	}
	return false
}

// Stop waits, after a pause of a holder, until the resumed holder's hold has ended (its write,
// refused or not, comes before), at most the lease and half a second; then ends the streams and
// returns the lanes of the hot item (nil r: nil). An interrupted run (ctx ended) waits for nothing.
func (r *Recording) Stop(ev *Event) *Lanes {
	if r == nil {
		return nil
	}
	if ev != nil && ev.Paused && ev.Token > 0 {
		deadline := time.Now().Add(r.settle)
		for !r.ended(ev.Instance, ev.Token) && time.Now().Before(deadline) && r.ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	end := time.Now()
	r.cancel()
	r.wg.Wait()
	r.hc.CloseIdleConnections()
	r.mu.Lock()
	defer r.mu.Unlock()
	l := BuildLanes(r.hot, r.events, r.pids, r.start, end, ev)
	l.Missed = r.missed
	l.Notes = append(l.Notes, r.notes...)
	return l
}
