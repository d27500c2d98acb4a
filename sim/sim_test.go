package sim

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stockguard/stockguard/inventory"
)

var (
	flagSeed   = flag.Uint64("sim.seed", 0, "run only this seed's schedule (a failure prints its seed)")
	flagSeeds  = flag.Int("sim.seeds", 40, "schedules TestSim runs, seeds sim.first, sim.first+1, ...")
	flagFirst  = flag.Uint64("sim.first", 1, "the first seed TestSim runs")
	flagV      = flag.Bool("sim.v", false, "log the processes' warnings to stderr")
	flagReplay = flag.Int("sim.replays", 1, "times each seed runs (replay reproducibility)")
	flagStall  = flag.Duration("sim.stall", time.Minute, "wall time after which one schedule counts as stalled")
)

// runSeed runs one schedule in a bubble of its own and returns what it recorded.
func runSeed(t *testing.T, seed uint64, mutate func(*inventory.Config)) Outcome {
	t.Helper()
	plan := NewPlan(seed)
	log := discardLogger
	if *flagV {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	dir := t.TempDir()
	var out Outcome
	// A bubble whose goroutine waits on something it cannot see (a mutex held across a timed
	// wait, a system call) never advances its clock: a stall. The watchdog, outside the
	// bubble, names the seed and ends the binary with every goroutine's stack.
	watchdog := time.AfterFunc(*flagStall, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("sim: seed %d stalled for %s of wall time (a wait the bubble cannot see)\n%s", seed, *flagStall, plan))
	})
	synctest.Test(t, func(t *testing.T) {
		out = run(plan, dir, log, mutate)
	})
	watchdog.Stop()
	_ = os.RemoveAll(dir)
	return out
}

// report is a failure as it is printed: seed, schedule, violated checks.
func report(out Outcome, vs []Violation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "FAILED %s", out.Plan)
	for i, v := range vs {
		if i == 12 {
			fmt.Fprintf(&b, "  ... %d more\n", len(vs)-i)
			break
		}
		fmt.Fprintf(&b, "  violated %s\n", v)
	}
	fmt.Fprintf(&b, "replay: go test ./sim -run 'TestSim$' -sim.seed=%d\n", out.Plan.Seed)
	return b.String()
}

// TestSim runs -sim.seeds schedules of the real code (or the one -sim.seed names) and checks
// each; its last line is the rate.
func TestSim(t *testing.T) {
	seeds := make([]uint64, 0, *flagSeeds)
	if *flagSeed != 0 {
		seeds = append(seeds, *flagSeed)
	} else {
		for i := range *flagSeeds {
			seeds = append(seeds, *flagFirst+uint64(i))
		}
	}
	start := time.Now()
	var simulated time.Duration
	ops, runs, failed := 0, 0, 0
	for _, seed := range seeds {
		for range *flagReplay {
			out := runSeed(t, seed, nil)
			runs++
			ops += out.Ops
			simulated += out.Elapsed
			if vs, _ := Check(out); len(vs) > 0 {
				failed++
				t.Error(report(out, vs))
			}
		}
	}
	wall := time.Since(start)
	fmt.Printf("schedules: %d, failed %d, operations %d (%d a schedule), simulated %s in %s (%.0fx)\n",
		runs, failed, ops, ops/max(runs, 1), simulated.Round(time.Second), wall.Round(time.Millisecond), float64(simulated)/float64(wall))
	fmt.Printf("schedules/min: %.0f\n", float64(runs)/wall.Minutes())
}
