package sim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/inventory"
)

func init() {
	// go-redis logs a failed dial to its own logger: a killed process's dials fail by design.
	redis.SetLogger(quietRedis{})
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var (
	flagSeed   = flag.Uint64("sim.seed", 0, "run only this seed's schedule (a failure prints its seed)")
	flagSeeds  = flag.Int("sim.seeds", 200, "schedules TestSim runs, seeds sim.first, sim.first+1, ... (under -short, when not set: 12)")
	flagFirst  = flag.Uint64("sim.first", 1, "the first seed TestSim runs")
	flagStep   = flag.Uint64("sim.step", 1, "TestSim's seeds are sim.first, sim.first+step, ... (2 from an even seed: every plan has the hot item in carts)")
	flagV      = flag.Bool("sim.v", false, "log the processes' warnings to stderr")
	flagReplay = flag.Int("sim.replays", 1, "times each seed runs (replay reproducibility)")
	flagMut    = flag.String("sim.mutation", "", "TestSim runs the mutation run's plans of this mutation (mutations.go; reuse-tried-token needs -tags simmutation)")
	flagProcs  = flag.Int("sim.gomaxprocs", 0, "TestSim runs with this GOMAXPROCS (1: one thread runs Go code at a time; replays come back more often, not always: docs/simulation.md)")
	flagStall  = flag.Duration("sim.stall", time.Minute, "wall time in which no bubble did anything, after which a running schedule counts as stalled")
)

// runSeed runs one schedule in a bubble of its own and returns what it recorded.
func runSeed(t *testing.T, seed uint64, mutate func(*inventory.Config)) Outcome {
	t.Helper()
	if *flagMut != "" {
		return runPlan(t, mutationPlan(*flagMut, seed), mutationConfig(*flagMut))
	}
	return runPlan(t, NewPlan(seed), mutate)
}

// runPlan runs plan in a bubble of its own and returns what it recorded.
func runPlan(t *testing.T, plan Plan, mutate func(*inventory.Config)) Outcome {
	t.Helper()
	seed := plan.Seed
	log := discardLogger
	if *flagV {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	dir := t.TempDir()
	var out Outcome
	// A bubble whose goroutine waits on something it cannot see (a mutex held across a timed
	// wait, a system call) never advances its clock: a stall. The watchdog, outside the
	// bubble, names the seed and ends the binary with every goroutine's stack once nothing
	// went on for sim.stall of wall time: no request, statement or Redis command in any
	// bubble of the binary (progress). A bubble starved of CPU beside a loaded machine goes
	// on slowly and is no stall (a wall-time bound alone called four seeds of a long run
	// stalled beside make test at nice 19; each ran in under 7 s alone); one stalled bubble
	// among others that go on is named once they have ended. A bubble busy while its clock
	// stands still (a loop of reads: the first fault the simulator found) goes on without
	// end: ten times sim.stall of wall time for one schedule names it.
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() { // owner: runPlan, which closes stopWatch and waits on watched
		defer close(watched)
		tick := time.NewTicker(*flagStall)
		defer tick.Stop()
		began, last := time.Now(), progress.Load()
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
			now := progress.Load()
			why := ""
			switch {
			case now == last:
				why = fmt.Sprintf("nothing went on for %s of wall time (a wait the bubble cannot see)", *flagStall)
			case time.Since(began) > 10*(*flagStall):
				why = fmt.Sprintf("still running after %s of wall time (a bubble busy while its clock stands still, or a machine starved for minutes)", time.Since(began).Round(time.Second))
			}
			if why != "" {
				debug.SetTraceback("all")
				panic(fmt.Sprintf("sim: seed %d stalled: %s\n%s", seed, why, plan))
			}
			last = now
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		out = run(plan, dir, log, mutate)
		// Simulated seconds for the goroutines the run closed to notice it and end: go-redis's
		// pool, after its dials failed, probes once a second until it sees itself closed. The
		// bubble's clock stands still once this function returns, and a goroutine still
		// asleep then is reported as outliving the bubble.
		time.Sleep(3 * time.Second)
	})
	close(stopWatch)
	<-watched
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
	if m := out.Plan.Mutation; m != "" {
		fmt.Fprintf(&b, "replay: go test -tags simmutation ./sim -run 'TestSim$' -sim.seed=%d -sim.mutation=%s\n", out.Plan.Seed, m)
	} else {
		fmt.Fprintf(&b, "replay: go test ./sim -run 'TestSim$' -sim.seed=%d\n", out.Plan.Seed)
	}
	return b.String()
}

// tally counts the schedules a test ran.
type tally struct {
	mu        sync.Mutex
	runs      int
	hot       int            // runs whose plan put the hot item in most carts
	failed    map[uint64]int // failures by seed
	ops       int
	simulated time.Duration
}

func (ta *tally) add(seed uint64, out Outcome, failed bool) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.runs++
	if out.Plan.HotInCarts {
		ta.hot++
	}
	ta.ops += out.Ops
	ta.simulated += out.Elapsed
	if failed {
		if ta.failed == nil {
			ta.failed = map[uint64]int{}
		}
		ta.failed[seed]++
	}
	return ta.runs
}

// print writes the tally; its last line is the rate.
func (ta *tally) print(wall time.Duration) {
	nf := 0
	for _, n := range ta.failed {
		nf += n
	}
	fmt.Printf("schedules: %d (%d with the hot item in carts), failed %d, operations %d (%d a schedule), simulated %s in %s (%.0fx), %d at once\n",
		ta.runs, ta.hot, nf, ta.ops, ta.ops/max(ta.runs, 1), ta.simulated.Round(time.Second), wall.Round(time.Millisecond),
		float64(ta.simulated)/float64(wall), parallelism())
	fmt.Printf("schedules/min: %.0f\n", float64(ta.runs)/wall.Minutes())
}

// parallelism is how many schedules run at once: go test's -parallel (GOMAXPROCS by default).
func parallelism() int {
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil {
			return n
		}
	}
	return runtime.GOMAXPROCS(0)
}

// seedsToRun are the seeds TestSim runs: -sim.seed alone, or -sim.seeds from -sim.first,
// -sim.step apart.
func seedsToRun() []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	n := *flagSeeds
	if testing.Short() && !flagSet("sim.seeds") {
		n = shortSeeds
	}
	seeds := make([]uint64, 0, n)
	for i := range n {
		seeds = append(seeds, *flagFirst+uint64(i)*max(*flagStep, 1))
	}
	return seeds
}

// shortSeeds is TestSim's number of schedules under -short (make test-short, the inner loop):
// about 4 s on two cores, where the default 200 (the run make test gives the package) take about 40 s.
const shortSeeds = 12

// flagSet tells whether the command line set flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runMany runs every seed -sim.replays times, -parallel at once, each in its own bubble, and
// checks each run. It returns the tally.
func runMany(t *testing.T, seeds []uint64, mutate func(*inventory.Config), quiet bool) *tally {
	ta := &tally{}
	t.Run("schedules", func(t *testing.T) {
		for _, seed := range seeds {
			for r := range *flagReplay {
				t.Run(fmt.Sprintf("seed=%d/%d", seed, r), func(t *testing.T) {
					t.Parallel()
					out := runSeed(t, seed, mutate)
					vs, _ := Check(out)
					n := ta.add(seed, out, len(vs) > 0)
					if len(vs) > 0 && !quiet {
						fmt.Print(report(out, vs)) // now: a long run's parallel subtests report at its end
						t.Error(report(out, vs))
					}
					if n%100 == 0 {
						fmt.Printf("%d schedules\n", n)
					}
				})
			}
		}
	})
	return ta
}

// total is every schedule TestSim ran in this binary; TestMain prints it last.
var total struct {
	*tally
	wall time.Duration
}

// simGC is the binary's GOGC when the environment sets none. A schedule allocates about as fast
// as it computes (a fresh Lua state for each EVALSHA, the SQL driver's rows), and at the
// default of 100 the collector took a third of the CPU: 48 schedules, eight at once, used
// 27.8 s and 25.4 s of user CPU at 100, 18.9 s and 19.0 s at 400 (167–180 schedules/min
// against 234–236), 18.1 s at 1000. The heap stays near 220 MB at 400 (docs/simulation.md).
const simGC = 400

// TestMain prints the rate of TestSim's schedules as the binary's last lines (make sim runs
// the binary itself, so that "schedules/min: N" is its last line).
func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(simGC)
	}
	code := m.Run()
	if total.tally != nil && total.runs > 0 {
		total.print(total.wall)
		if *flagReplay > 1 {
			fmt.Printf("(the failures by seed are above)\n")
		}
	}
	os.Exit(code)
}

// skipUnderRace: under the race detector a schedule costs ten times more; make test runs the
// package without it, on a line of its own.
func skipUnderRace(t *testing.T) {
	if raceOn {
		t.Skip("the simulator runs without -race (make test: go test ./sim on a line of its own)")
	}
}

// TestSim runs -sim.seeds schedules of the real code (or the one -sim.seed names), and
// checks each; the binary's last line is the rate.
func TestSim(t *testing.T) {
	skipUnderRace(t)
	if *flagMut == MutationReuseTriedToken {
		if !setReuseTriedToken(true) {
			t.Skip("needs -tags simmutation")
		}
		defer setReuseTriedToken(false)
	}
	if *flagProcs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(*flagProcs))
	}
	start := time.Now()
	ta := runMany(t, seedsToRun(), nil, false)
	total.tally, total.wall = ta, time.Since(start)
	if *flagReplay > 1 {
		for seed, n := range ta.failed {
			fmt.Printf("seed %d failed %d of %d replays\n", seed, n, *flagReplay)
		}
	}
}
