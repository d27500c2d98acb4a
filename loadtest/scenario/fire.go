package scenario

import (
	"context"
	"time"

	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// fire runs the workload with its progress display and, in chaos mode, the pause of an
// instance. It returns once the workload is done and any paused instance is resumed.
func fire(ctx context.Context, w *workload.Workload, pr *workload.Progress, ch *fault.Chaos, start time.Time, seed int64, r fault.Target) (time.Duration, *fault.Event) {
	var ev *fault.Event
	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	if ch != nil && ch.WaitsForRounds() {
		r.Rounds = make(chan struct{}) // -chaos mix closes it once its rounds fired
	}
	var rec *fault.Recording
	if ch != nil {
		rec = ch.Record(ctx, r.HotID, start) // -chaos pause: the hot lock's events, for the report's lanes
		go func() {                          // owner: fire, which closes stopChaos and waits on chaosDone
			defer close(chaosDone)
			ev = ch.Bring(ctx, stopChaos, start, r)
		}()
	} else {
		close(chaosDone)
	}
	// A fault that takes a few seconds (a failover) needs buyers of the hot item until its last
	// step (another instance holds the hot lock on the promoted replica, the stale holder is
	// resumed), and then until a purchase sent after the fault is sold (selling resumed): the
	// run's duration is extended until then. Each wait is bounded (fault.StepWait). The other
	// faults fit their default durations and extend nothing.
	var hold chan struct{}
	loadEnded := make(chan struct{})
	holdDone := make(chan struct{})
	if ch != nil && ch.Mode().KeepSelling {
		hold = make(chan struct{})
		go func() { // owner: fire, which closes loadEnded and waits on holdDone
			defer close(holdDone)
			defer close(hold)
			select {
			case <-chaosDone:
			case <-loadEnded:
				return
			}
			if ev == nil || ev.FaultAt == 0 {
				return
			}
			faultAt := start.Add(time.Duration(ev.FaultAt * float64(time.Second))).UnixNano()
			deadline := time.NewTimer(fault.StepWait)
			defer deadline.Stop()
			for w.LastSold() <= faultAt {
				select {
				case <-loadEnded:
					return
				case <-ctx.Done():
					return
				case <-deadline.C:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	} else {
		hold = r.Rounds // nil but with -mix-rounds
		close(holdDone)
	}
	pr.Start()
	elapsed := w.Run(ctx, seed, hold)
	close(loadEnded)
	<-holdDone
	close(stopChaos)
	<-chaosDone // a pause in progress ends (the instance is resumed) before anything is checked
	if lanes := rec.Stop(ev); lanes != nil && ev != nil {
		ev.Lanes = lanes
	}
	pr.Finish()
	return elapsed, ev
}
