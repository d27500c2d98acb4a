package sim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
)

// mutationBudget is how many seeds a mutation run may take to find its mutation's violation;
// past it the test fails. The figures of docs/simulation.md are the seeds each took.
const mutationBudget = 40

// mutationPlan is the plan of seed for mutation m: the real code's plan, with the mutation
// on, tilted towards the faults that reach it (for the stock guard, stockGuardFaults; for
// the spent token, a streaming hold's lost COMMITs).
func mutationPlan(m string, seed uint64) Plan {
	p := NewPlan(seed)
	p.Mutation = m
	p.Strategy = "lock+guard"
	if m == MutationNoStockGuard {
		stockGuardFaults(&p)
	}
	if m == MutationReuseTriedToken {
		p.StreamAlone = true
		for slot := range p.Procs {
			for k := range 3 {
				at := time.Second + time.Duration(k)*4*time.Second + time.Duration(slot)*700*time.Millisecond
				p.Faults = append(p.Faults, Fault{Kind: FaultCommitLost, Slot: slot, At: at, End: at + 3*time.Second, Count: 2})
			}
		}
	}
	return p
}

// mutationConfig is what mutation m's runs change in each process's inventory.Config: the
// spent token's runs stream every hold for a second (Config.StreamHold), so that a lost
// COMMIT is often followed by another write of the same hold.
func mutationConfig(m string) func(*inventory.Config) {
	if m != MutationReuseTriedToken {
		return nil
	}
	return func(c *inventory.Config) { c.StreamHold = time.Second }
}

// seedsToFail runs the seeds 1, 2, ... of mutation m, parallelism() at once, until one fails
// a check, up to budget. It returns the first failing seed's number of seeds (0: none failed),
// its report, and the twin refusals (Outcome.Twins) of every seed it ran.
func seedsToFail(t *testing.T, m string, budget int) (int, string, int64) {
	first, report1 := 0, ""
	var twins int64
	var mu sync.Mutex
	for base := 1; base <= budget && first == 0; base += parallelism() {
		t.Run(fmt.Sprintf("from=%d", base), func(t *testing.T) {
			for i := base; i < base+parallelism() && i <= budget; i++ {
				t.Run(fmt.Sprintf("seed=%d", i), func(t *testing.T) {
					t.Parallel()
					out := runPlan(t, mutationPlan(m, uint64(i)), mutationConfig(m))
					vs, _ := Check(out)
					mu.Lock()
					defer mu.Unlock()
					twins += out.Twins
					if len(vs) > 0 && (first == 0 || i < first) {
						first, report1 = i, report(out, vs)
					}
				})
			}
		})
	}
	return first, report1, twins
}

// weakMutations are the mutations another rule of the sale path covers, so that no check
// can see them (docs/simulation.md, "Mutations", says why). They run with -sim.weak (make sim
// does): their result is reported, with how often the mutated write ran, not enforced.
var weakMutations = map[string]bool{MutationReuseTriedToken: true}

var flagWeak = flag.Bool("sim.weak", false, "TestMutations also runs the mutations no check can see (reported, not enforced)")

// TestMutations: the simulator finds each mutation within mutationBudget seeds. It prints the
// seeds each took and the violation that found it.
func TestMutations(t *testing.T) {
	skipUnderRace(t)
	testutil.SkipShort(t, testutil.Mutation)
	for _, m := range []string{MutationNoFence, MutationHoldUncounted, MutationCartSplit, MutationNoStockGuard, MutationReuseTriedToken} {
		t.Run(m, func(t *testing.T) {
			if weakMutations[m] && !*flagWeak {
				t.Skip("covered by another rule, no check can see it (docs/simulation.md): -sim.weak runs it")
			}
			if m == MutationReuseTriedToken {
				if !setReuseTriedToken(true) {
					t.Skip("needs -tags simmutation (make sim)")
				}
				defer setReuseTriedToken(false)
			}
			start := time.Now()
			n, rep, twins := seedsToFail(t, m, mutationBudget)
			switch {
			case n == 0 && weakMutations[m]:
				// The same plans without the mutation: the twin refusals the mutation added
				// are the writes under a tried token it made, each refused and recovered.
				setReuseTriedToken(false)
				nb, repb, base := seedsToFail(t, m, mutationBudget)
				if nb != 0 {
					t.Errorf("the same plans of the real code failed:\n%s", repb)
				}
				fmt.Printf("mutation %s: no violation in %d seeds (%s; not enforced): %d purchase attempts refused under their own token, %d without the mutation\n",
					m, mutationBudget, time.Since(start).Round(time.Millisecond), twins, base)
			case n == 0:
				t.Fatalf("mutation %s: no violation in %d seeds", m, mutationBudget)
			default:
				fmt.Printf("mutation %s: found at seed %d (%s)\n%s", m, n, time.Since(start).Round(time.Millisecond), rep)
			}
		})
	}
}

// stockGuardFaults tilts p towards the one interleaving where the fenced write's stock >= ?
// refuses what the fence lets through. The watchdog renews a lease while Redis answers, so a
// held write alone never goes stale: Redis must hang past the lease. Then:
//  1. holder A of the hot item has admitted a batch on the stock it read, and its write is
//     held at its connection (every process's transactions are held, from at);
//  2. Redis hangs (at+0.4s) until A's key has expired (lockLease and a half second later):
//     A's watchdog declares the loss, but its write is already on its way;
//  3. the hang ends, B takes the lock with a newer token and reads the stock (reads are not
//     held), and admits a batch on it;
//  4. the held writes are let go (50–450 ms after the hang): A's lands first (its token is
//     older than B's, but B has not written yet, so the fence lets it through), then B's
//     write takes the batch it admitted on a stock A's write has since taken.
//
// With the guard B's write is refused and read again (moved, readmit); without it the stock
// goes below zero when the stock left is smaller than B's batch: a small hot item (12 to 35
// units), whose few units left when the first hang begins are what B's batch admits.
func stockGuardFaults(p *Plan) {
	rng := rand.New(rand.NewPCG(p.Seed, 0x57c0))
	p.Items[hotItem].Stock = 12 + rng.IntN(24)
	p.Faults = p.Faults[:0]
	for k := range 2 {
		at := 1200*time.Millisecond + time.Duration(k)*8*time.Second
		hangEnd := at + 400*time.Millisecond + lockLease + 500*time.Millisecond
		held := hangEnd + time.Duration(50+rng.IntN(400))*time.Millisecond
		for slot := range p.Procs {
			p.Faults = append(p.Faults, Fault{Kind: FaultHoldWrites, Slot: slot, At: at, End: held})
		}
		p.Faults = append(p.Faults, Fault{Kind: FaultRedisHang, Slot: -1, At: at + 400*time.Millisecond, End: hangEnd})
	}
}
