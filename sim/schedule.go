package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/inventory"
)

// The kinds of fault a schedule draws from.
const (
	FaultKill       = "kill"        // a process dies; a fresh one takes its place at the end
	FaultHoldWrites = "hold-writes" // a process's transactions are held at its connections, past its lease
	FaultRedisEmpty = "redis-empty" // Redis restarts empty: every key lost, every connection dropped
	FaultRedisHang  = "redis-hang"  // Redis stops answering, its connections open
	FaultRedisLate  = "redis-late"  // every Redis answer comes late
	FaultCommitLost = "commit-lost" // a process's next COMMITs land, their answer lost
	FaultCommitFail = "commit-fail" // a process's next COMMITs fail
	FaultSlowSQL    = "slow-sql"    // a process's statements are slow
	FaultClockStep  = "clock-step"  // the database's clock steps forward (holds expire by it)
)

var faultKinds = []string{FaultKill, FaultHoldWrites, FaultRedisEmpty, FaultRedisHang, FaultRedisLate,
	FaultCommitLost, FaultCommitFail, FaultSlowSQL, FaultClockStep}

// Fault is one fault of a schedule: what, on which process slot (-1: not a process's), from
// At to End in simulated time since the run began, and its size (a delay, a clock step, a
// number of commits).
type Fault struct {
	Kind  string
	Slot  int
	At    time.Duration
	End   time.Duration
	Delay time.Duration
	Count int
}

func (f Fault) String() string {
	s := fmt.Sprintf("%7s-%7s %-12s", f.At.Round(time.Millisecond), f.End.Round(time.Millisecond), f.Kind)
	if f.Slot >= 0 {
		s += fmt.Sprintf(" proc %d", f.Slot)
	}
	if f.Delay > 0 {
		s += fmt.Sprintf(" %s", f.Delay.Round(time.Millisecond))
	}
	if f.Count > 0 {
		s += fmt.Sprintf(" x%d", f.Count)
	}
	return s
}

// Plan is everything a seed decides: the processes, the catalogue, the buyers and the faults.
type Plan struct {
	Seed        uint64
	Procs       int
	Strategy    string // the buyers' strategy: lock+guard, or guard
	StreamAlone bool   // the processes' coalesced holds stream while nobody else wants their locks
	HotInCarts  bool   // the hot item is in most carts
	Buyers      int
	Faults      []Fault
	FaultsEnd   time.Duration // no fault is active from here on
	BuyersEnd   time.Duration // the buyers stop starting operations
	Probe       time.Duration // the liveness probes start
	End         time.Duration // the probes give up
	Items       []inventory.NewItem
	HoldItems   int    // the last HoldItems items are the ones holds touch
	Mutation    string // the mutation a mutation run turns on (mutations.go); "" for the real code
}

// Hot is the hot item's index (item id 1).
const hotItem = 0

// NewPlan draws the plan of seed.
func NewPlan(seed uint64) Plan {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	p := Plan{Seed: seed, Procs: 3, Strategy: inventory.StrategyLockGuard, Buyers: 30,
		FaultsEnd: 18 * time.Second, BuyersEnd: 24 * time.Second, Probe: 26 * time.Second, End: 36 * time.Second}
	if rng.IntN(5) == 0 {
		p.Strategy = inventory.StrategyGuard
	}
	p.StreamAlone = rng.IntN(2) == 0
	p.HotInCarts = seed%2 == 0
	p.Items = []inventory.NewItem{{SKU: "hot", Name: "hot", Stock: 120 + rng.IntN(60), PriceCents: 100}}
	for i := range 3 {
		p.Items = append(p.Items, inventory.NewItem{SKU: fmt.Sprintf("item-%d", i+2), Name: "item", Stock: 30 + rng.IntN(40), PriceCents: 100})
	}
	p.HoldItems = 2
	for i := range p.HoldItems {
		p.Items = append(p.Items, inventory.NewItem{SKU: fmt.Sprintf("held-%d", i+1), Name: "held", Stock: 40 + rng.IntN(20), PriceCents: 100})
	}
	n := 5 + rng.IntN(4)
	for range n {
		p.Faults = append(p.Faults, drawFault(rng, p))
	}
	return p
}

func drawFault(rng *rand.Rand, p Plan) Fault {
	kind := faultKinds[rng.IntN(len(faultKinds))]
	at := time.Second + time.Duration(rng.Int64N(int64(p.FaultsEnd-10*time.Second)))
	f := Fault{Kind: kind, Slot: -1, At: at}
	span := func(lo, hi time.Duration) { f.End = f.At + lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch kind {
	case FaultKill:
		f.Slot = rng.IntN(p.Procs)
		span(200*time.Millisecond, 2*time.Second)
	case FaultHoldWrites:
		f.Slot = rng.IntN(p.Procs)
		span(lockLease+500*time.Millisecond, lockLease+3*time.Second)
	case FaultRedisEmpty:
		f.End = f.At
	case FaultRedisHang:
		span(100*time.Millisecond, 3*time.Second)
	case FaultRedisLate:
		span(500*time.Millisecond, 4*time.Second)
		f.Delay = time.Duration(5+rng.IntN(400)) * time.Millisecond
	case FaultCommitLost, FaultCommitFail:
		f.Slot = rng.IntN(p.Procs)
		f.Count = 1 + rng.IntN(3)
		span(time.Second, 4*time.Second)
	case FaultSlowSQL:
		f.Slot = rng.IntN(p.Procs)
		span(500*time.Millisecond, 4*time.Second)
		f.Delay = time.Duration(1+rng.IntN(300)) * time.Millisecond
	case FaultClockStep:
		f.End = f.At
		f.Delay = time.Duration(1+rng.IntN(90)) * time.Second
	}
	return f
}

// String is the plan as a failure prints it.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d processes, %s, stream-alone %v, hot item in carts %v, %d buyers",
		p.Seed, p.Procs, p.Strategy, p.StreamAlone, p.HotInCarts, p.Buyers)
	if p.Mutation != "" {
		fmt.Fprintf(&b, ", mutation %s", p.Mutation)
	}
	b.WriteString("\n")
	faults := slices.Clone(p.Faults)
	slices.SortStableFunc(faults, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	for _, f := range faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}
