package sim

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/inventory"
)

// world is one simulated run: the database file and its driver's state, Redis, the
// processes, and what the buyers saw.
type world struct {
	plan   Plan
	log    *slog.Logger
	dbPath string
	db     *dbWorld
	redis  *redisWorld
	mutate func(*inventory.Config)
	start  time.Time

	mu     sync.Mutex
	procs  []*process // by slot: the live process of each place
	all    []*process // every process started, to close at the end
	nextID int

	rec       *linearize.Recorder
	carts     []*verdict.Cart
	holds     []*verdict.Hold
	holdKeys  []*verdict.HoldKey
	cancels   []*verdict.Hold // holds whose cancellation was never answered (replay)
	confirms  []*verdict.Hold // holds whose confirmation was never answered (replay)
	ops       int
	faultProc map[int]*dbProc // the database side of the process each fault began on (drive's)
	stuck     []string        // liveness: the items with stock that the probes could not buy
	twins     atomic.Int64    // purchase attempts refused by the fence under the very token it had seen
}

// Outcome is what one run recorded, for the checks after the bubble.
type Outcome struct {
	Plan     Plan
	Ops      int // operations sent (attempts, replays and probes included)
	Commits  int64
	Twins    int64 // purchase attempts the fence refused under the token it had already seen (twinCounter)
	History  []linearize.Operation
	Stock    map[int64]int // the initial stock of the items the history covers
	Run      verdict.CartRun
	Stuck    []string
	Elapsed  time.Duration // simulated
	SetupErr error
}

// progress counts what every bubble of this process does (requests, SQL statements, Redis
// commands): the stall watchdog (runPlan) tells a bubble that stopped, its clock standing
// still on a wait it cannot see, from one starved of CPU, which goes on slowly.
var progress atomic.Int64

// run runs plan inside the caller's bubble and returns what it recorded. dir holds the
// database file.
func run(plan Plan, dir string, log *slog.Logger, mutate func(*inventory.Config)) Outcome {
	if mutate == nil {
		mutate = func(*inventory.Config) {}
	}
	w := &world{plan: plan, log: log, dbPath: filepath.Join(dir, "sim.db"), db: newDBWorld(), redis: newRedisWorld(),
		mutate: mutate, start: time.Now(), rec: linearize.NewRecorder()}
	defer w.db.close()
	defer w.redis.close()
	w.db.mutation = plan.Mutation
	out := Outcome{Plan: plan}
	defer w.closeAll()
	for slot := range plan.Procs {
		p, err := w.startProcess(w.newID(), slot)
		if err != nil {
			out.SetupErr = err
			return out
		}
		w.procs = append(w.procs, p)
		w.all = append(w.all, p)
	}
	ctx := context.Background()
	if err := w.procs[0].svc.Reset(ctx, plan.Items); err != nil {
		out.SetupErr = fmt.Errorf("sim: reset: %w", err)
		return out
	}
	var wg sync.WaitGroup
	wg.Go(w.drive)
	for b := range plan.Buyers {
		wg.Go(func() { w.buyer(b) })
	}
	wg.Wait()
	w.probe()
	w.replay()
	run, err := w.collect(ctx)
	if err != nil {
		out.SetupErr = err
		return out
	}
	out.Run = run
	out.Ops = w.ops
	out.Commits = w.db.commits.Load()
	out.Twins = w.twins.Load()
	out.History = w.rec.Operations()
	out.Stock = map[int64]int{}
	for i, it := range plan.Items[:len(plan.Items)-plan.HoldItems] {
		out.Stock[int64(i+1)] = it.Stock
	}
	out.Stuck = w.stuck
	out.Elapsed = time.Since(w.start)
	return out
}

func (w *world) newID() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	return w.nextID
}

func (w *world) closeAll() {
	w.mu.Lock()
	all := slices.Clone(w.all)
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(p.close)
	}
	wg.Wait()
}

// at sleeps until d after the run began.
func (w *world) at(d time.Duration) {
	if wait := time.Until(w.start.Add(d)); wait > 0 {
		time.Sleep(wait)
	}
}

// proc returns the live process of slot (nil while it is dead).
func (w *world) proc(slot int) *process {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.procs[slot]
}

// event is one start or end of a fault.
type event struct {
	at    time.Duration
	start bool
	f     Fault
	idx   int // the fault's index in the plan
}

// drive applies the plan's faults at their times.
func (w *world) drive() {
	var evs []event
	for i, f := range w.plan.Faults {
		evs = append(evs, event{f.At, true, f, i})
		if f.End > f.At {
			evs = append(evs, event{f.End, false, f, i})
		}
	}
	w.faultProc = map[int]*dbProc{}
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.at - b.at) })
	for _, e := range evs {
		w.at(e.at)
		w.apply(e)
	}
}

func (w *world) apply(e event) {
	f := e.f
	// A process's fault ends on the process it began on (a kill may have replaced it since).
	dp := w.faultProc[e.idx]
	if e.start && f.Slot >= 0 {
		if p := w.proc(f.Slot); p != nil {
			dp = w.db.proc(p.id)
			w.faultProc[e.idx] = dp
		}
	}
	switch f.Kind {
	case FaultKill:
		if e.start {
			if p := w.proc(f.Slot); p != nil {
				w.mu.Lock()
				w.procs[f.Slot] = nil
				w.mu.Unlock()
				w.kill(p)
			}
			return
		}
		if w.proc(f.Slot) != nil {
			return
		}
		p, err := w.startProcess(w.newID(), f.Slot)
		if err != nil {
			w.log.Error("sim: restart", "err", err)
			return
		}
		w.mu.Lock()
		w.procs[f.Slot] = p
		w.all = append(w.all, p)
		w.mu.Unlock()
	case FaultHoldWrites:
		if dp == nil {
			return
		}
		dp.mu.Lock()
		if e.start && dp.hold == nil {
			dp.hold = make(chan struct{})
		} else if !e.start && dp.hold != nil {
			close(dp.hold)
			dp.hold = nil
		}
		dp.mu.Unlock()
	case FaultRedisEmpty:
		w.redis.restart()
	case FaultRedisHang:
		w.redis.setHang(e.start)
	case FaultRedisLate:
		if e.start {
			w.redis.setLate(f.Delay)
		} else {
			w.redis.setLate(0)
		}
	case FaultCommitLost, FaultCommitFail:
		if dp == nil {
			return
		}
		dp.mu.Lock()
		n := 0
		if e.start {
			n = f.Count
		}
		if f.Kind == FaultCommitLost {
			dp.commitLost = n
		} else {
			dp.commitFail = n
		}
		dp.mu.Unlock()
	case FaultSlowSQL:
		if dp == nil {
			return
		}
		dp.mu.Lock()
		if e.start {
			dp.slow = f.Delay
		} else {
			dp.slow = 0
		}
		dp.mu.Unlock()
	case FaultClockStep:
		w.db.step.Add(f.Delay.Milliseconds())
	}
}
