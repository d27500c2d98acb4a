package sim

import "testing"

// The seeds of faults the simulator found in the real code, each run again as a test of its
// own (docs/measured.md, "The simulator").

// runRegression runs seed's schedule of the real code and fails on any violated check (a
// stall panics the binary after -sim.stall, naming the seed).
func runRegression(t *testing.T, seed uint64) {
	t.Helper()
	skipUnderRace(t)
	out := runPlan(t, NewPlan(seed), nil)
	if vs, _ := Check(out); len(vs) > 0 {
		t.Fatal(report(out, vs))
	}
}

// TestSeedHeartbeatStall: seed 100150 of the 20,000-schedule run stalled (so did 100688 and
// 101491). locking's first Obtain with takeover wrote the process key holding a mutex across
// the round trip; Redis hung, so that round trip waited on the clock (its call timeout),
// while the process's other Obtains waited on the mutex, which is not a durable wait: the
// bubble's clock could not move, and nothing could end. The key's first write is now
// serialised on a channel (locking/heartbeat.go).
func TestSeedHeartbeatStall(t *testing.T) { runRegression(t, 100150) }
