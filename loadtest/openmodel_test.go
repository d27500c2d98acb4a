package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArrivalSchedule(t *testing.T) {
	// A fixed rate: n/rate.
	assert.Equal(t, time.Duration(0), arrival(0, 100, false))
	assert.Equal(t, 250*time.Millisecond, arrival(25, 100, false))
	assert.Equal(t, 3*time.Second, arrival(300, 100, false))

	// A spike to 1000/s: rate*t²/2 arrivals by t during the one-second ramp (500 in all),
	// then 1000 a second.
	assert.Equal(t, time.Duration(0), arrival(0, 1000, true))
	assert.InDelta(t, 0.5, arrival(125, 1000, true).Seconds(), 1e-9)
	assert.InDelta(t, 1.0, arrival(500, 1000, true).Seconds(), 1e-9)
	assert.InDelta(t, 2.0, arrival(1500, 1000, true).Seconds(), 1e-9)
	prev := time.Duration(-1)
	for n := 0; n < 3000; n++ {
		a := arrival(n, 1000, true)
		require.Greater(t, a, prev, "arrival %d", n)
		prev = a
	}
	// The rate grows: fewer arrivals in the ramp's first tenth than in its last.
	count := func(from, to time.Duration) int {
		c := 0
		for n := 0; n < 3000; n++ {
			if a := arrival(n, 1000, true); a >= from && a < to {
				c++
			}
		}
		return c
	}
	assert.Equal(t, 5, count(0, 100*time.Millisecond))
	assert.Equal(t, 95, count(900*time.Millisecond, time.Second))
	assert.Equal(t, 100, count(1900*time.Millisecond, 2*time.Second), "held at the rate after the ramp")
}

func TestQueuedFor(t *testing.T) {
	intended := time.Now()
	sent := intended.Add(30 * time.Millisecond)
	r := PurchaseResult{Start: sent, Latency: 5 * time.Millisecond}
	assert.Equal(t, 30*time.Millisecond, queuedFor(spec{intended: intended}, 0, r), "the first attempt counts from its intended start")
	assert.Equal(t, time.Duration(0), queuedFor(spec{intended: intended, retry: true, seq: 1}, 1, r), "a copy sent after the answer counts from its send")
	assert.Equal(t, 30*time.Millisecond, queuedFor(spec{intended: intended, retry: true, seq: 2}, 1, r), "a copy sent at once counts from the intended start")
	assert.Equal(t, time.Duration(0), queuedFor(spec{}, 0, r), "closed model")
	assert.Equal(t, time.Duration(0), queuedFor(spec{intended: sent.Add(time.Millisecond)}, 0, r), "never negative")
}

// TestFakeSpike runs a flash sale against the fake: the arrivals ramp, the requests in flight
// are sampled over the run, and latency is counted from the intended starts.
func TestFakeSpike(t *testing.T) {
	_, srv := newFake(t, true)
	cfg := fakeConfig("guard")
	cfg.Rate, cfg.Spike, cfg.Requests, cfg.Concurrency, cfg.Reads = 400, true, 300, 1000, 0.1
	rep, err := RunTargets(context.Background(), cfg, []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	g := rep.Strategies[0]
	assert.Equal(t, 300, g.Requests+g.Missed)
	// 200 arrivals in the ramp's second, about 130 more (purchases and reads) at 400/s.
	assert.GreaterOrEqual(t, g.DurationS, 1.2)
	assert.NotEmpty(t, g.InFlight)
	assert.GreaterOrEqual(t, len(g.InFlight), 10, "sampled every 100ms")
	assert.Equal(t, int64(0), g.InFlight[len(g.InFlight)-1].InFlight, "nothing in flight at the end")
	assert.True(t, rep.Config.Spike)
	assert.Equal(t, "intended start", rep.Config.LatencyFrom)
	var out bytes.Buffer
	rep.WriteTable(&out)
	assert.Contains(t, out.String(), "spike 0 to 400/s in 1s then held, latency from intended start")
}
