//go:build !nodemo

package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// The kill lesson (POST /api/lab/takeover): lock+guard on one item and lock on another, at
// once, each a burst round-robin across the instances; once both items' locks are held, the
// supervisor kills their holders with SIGKILL at the same instant (one process holding both
// dies once) and starts them again. lock+guard's waiters take the dead holder's lock over
// (locking.WithTakeover: its process key is gone, about a second after the kill, whatever the
// lease); lock's waiters wait out the lease. Its answer is both runs, each with its sales gap.

// takeoverRequest is the body of POST /api/lab/takeover: Items[0] is sold with lock+guard,
// Items[1] with lock.
type takeoverRequest struct {
	Items    []int64 `json:"items"`
	Buyers   int     `json:"buyers"`
	WorkMS   int     `json:"work_ms"`
	Quantity int     `json:"quantity"`
}

// takeoverResult is the answer of the kill lesson.
type takeoverResult struct {
	Runs      []labRunResult `json:"runs"` // lock+guard's, then lock's
	Killed    []Killed       `json:"killed,omitempty"`
	LeaseMS   float64        `json:"lease_ms"` // the instances' lease during the lesson
	StartedMS float64        `json:"started_ms"`
	EndedMS   float64        `json:"ended_ms"`
	Note      string         `json:"note,omitempty"`
}

// lessonStrategies are the strategies of the kill lesson, in the order of its items.
var lessonStrategies = [2]string{inventory.StrategyLockGuard, inventory.StrategyLock}

// validate checks the lesson's fields as a run's are checked, before anything is sold.
func (r takeoverRequest) validate() error {
	if len(r.Items) != 2 || r.Items[0] == r.Items[1] {
		return invalidField("items", "two different item ids (lock+guard's, then lock's)", r.Items)
	}
	for i, item := range r.Items {
		if err := r.run(i, item).validate(); err != nil {
			return err
		}
	}
	return nil
}

// run is the burst of the lesson's item number i.
func (r takeoverRequest) run(i int, item int64) labRunRequest {
	return labRunRequest{Strategy: lessonStrategies[i], Buyers: r.Buyers, WorkMS: r.WorkMS, Quantity: max(1, r.Quantity), Item: item, Fault: faultKill}
}

// takeover answers POST /api/lab/takeover (supervisor only).
func (l *api) takeover(c *gin.Context) {
	serveRun(c, func(takeoverRequest) error {
		if l.sup == nil {
			return errKillUnsupported
		}
		return nil
	}, func(ctx context.Context, req takeoverRequest) (takeoverResult, error) {
		return l.lesson(ctx, req)
	})
}

// lesson runs the two bursts at once, with one kill for both.
func (l *api) lesson(ctx context.Context, req takeoverRequest) (takeoverResult, error) {
	res := takeoverResult{Runs: make([]labRunResult, 2), LeaseMS: ms(l.sup.Lease()), StartedMS: unixMS(time.Now())}
	insts := l.sup.Instances()
	var once sync.Once
	var note string
	kill := func(ctx context.Context) ([]Killed, string) {
		once.Do(func() { res.Killed, note = l.killHolders(ctx, req.Items) })
		return res.Killed, note
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, item := range req.Items {
		wg.Go(func() { res.Runs[i], errs[i] = l.burst(ctx, insts, req.run(i, item), kill) })
	}
	wg.Wait()
	res.EndedMS = unixMS(time.Now())
	res.Note = note
	for i, err := range errs {
		if err != nil {
			return res, fmt.Errorf("%s on item %d: %w", lessonStrategies[i], req.Items[i], err)
		}
	}
	return res, nil
}
