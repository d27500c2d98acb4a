package soak

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// series makes n points 2s apart: base + slope×t + noise in [-noise, noise].
func series(n int, base, slope, noise float64, seed uint64) []Point {
	rng := rand.New(rand.NewPCG(seed, 1))
	pts := make([]Point, n)
	for i := range pts {
		t := float64(2 * i)
		pts[i] = Point{At: t, Value: base + slope*t + noise*(2*rng.Float64()-1)}
	}
	return pts
}

func TestJudgeFlatNoisySeriesIsNoLeak(t *testing.T) {
	// Goroutines of a busy storefront: 60 ± 32 (clients in flight), ten minutes.
	f := Judge(Goroutines, "i0", series(300, 60, 0, 32, 1), 20*time.Second)
	if f.Leak || f.Short != "" {
		t.Fatalf("flat series judged %+v", f)
	}
}

func TestJudgeSteadyGrowthIsLeak(t *testing.T) {
	// One goroutine a second kept (a goroutine per purchase at a trickle) over 100 s, under the
	// same noise: 80 more at the end, past the bound of 48.
	f := Judge(Goroutines, "i0", series(60, 60, 1, 32, 2), 20*time.Second)
	if !f.Leak {
		t.Fatalf("growing series not judged a leak: %+v", f)
	}
	if f.Slope < 0.5 || f.Slope > 1.5 {
		t.Fatalf("slope %.2f/s, want about 1", f.Slope)
	}
}

func TestJudgeSpikesOfFaultsAreNoLeak(t *testing.T) {
	// A flat series with a pile-up of 200 goroutines during each of four paused spans near the
	// end: a least-squares line would climb; the median slope does not.
	pts := series(100, 60, 0, 5, 3)
	for _, i := range []int{60, 61, 75, 76, 88, 89, 97, 98} {
		pts[i].Value += 200
	}
	if f := Judge(Goroutines, "i0", pts, 20*time.Second); f.Leak {
		t.Fatalf("spikes judged a leak: %+v", f)
	}
}

func TestJudgeOneStepIsNoLeak(t *testing.T) {
	// A pool that filled once in the middle (a step of 30 file descriptors, under the bound of
	// 48) then stayed: not a leak.
	pts := series(100, 40, 0, 2, 4)
	for i := 50; i < len(pts); i++ {
		pts[i].Value += 30
	}
	if f := Judge(OpenFDs, "i0", pts, 20*time.Second); f.Leak {
		t.Fatalf("a step below the bound judged a leak: %+v", f)
	}
}

func TestJudgeHeapBoundFollowsItsSize(t *testing.T) {
	// A 200 MiB heap breathing by ±60 MiB with a slow rise of 40 MiB: under half the median.
	pts := series(100, 200<<20, float64(40<<20)/200, 60<<20, 5)
	if f := Judge(HeapInuse, "i0", pts, 20*time.Second); f.Leak {
		t.Fatalf("a breathing heap judged a leak: %+v", f)
	}
	// The same heap doubling over the run is.
	pts = series(100, 200<<20, float64(400<<20)/200, 60<<20, 6)
	if f := Judge(HeapInuse, "i0", pts, 20*time.Second); !f.Leak {
		t.Fatalf("a doubling heap not judged a leak: %+v", f)
	}
}

func TestJudgeRiseThatFellBackIsNoLeak(t *testing.T) {
	// A backlog of 150 goroutines built over the middle half of the run and drained before its
	// last quarter: the median slope is positive, the last quarter is back at the start's level.
	pts := series(100, 60, 0, 5, 8)
	for i := 25; i < 75; i++ {
		pts[i].Value += 150 * float64(i-25) / 50
	}
	if f := Judge(Goroutines, "i0", pts, 0); f.Leak {
		t.Fatalf("a drained backlog judged a leak: %+v", f)
	}
}

func TestJudgeShortSeriesIsNotJudged(t *testing.T) {
	f := Judge(Goroutines, "i1@2", series(12, 60, 5, 0, 7), 20*time.Second)
	if f.Short == "" || f.Leak {
		t.Fatalf("a series of 2 points after the warm-up was judged: %+v", f)
	}
}

// A metric's line says LEAK and names the leaking series when one leaks, even if another
// series is steeper but fell back (its growth past the bound, its last quarter not).
func TestLinesNameTheLeakingSeries(t *testing.T) {
	res := &Result{Every: 2, Warmup: 20, Metrics: []Metric{Goroutines}, Fits: []Fit{
		{Metric: Goroutines.Name, Series: "spike", Points: 40, Window: 80, Growth: 100, Bound: 48, Shift: 10},
		{Metric: Goroutines.Name, Series: "leaky", Points: 40, Window: 80, Growth: 60, Bound: 48, Shift: 40, Leak: true},
	}}
	lines := res.Lines()
	if len(lines) < 2 || !strings.Contains(lines[1], "LEAK") || !strings.Contains(lines[1], "leaking leaky") {
		t.Fatalf("the metric's line does not name the leak:\n%s", strings.Join(lines, "\n"))
	}
}
