package workload

import (
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
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
	r := client.PurchaseResult{Start: sent, Latency: 5 * time.Millisecond}
	assert.Equal(t, 30*time.Millisecond, queuedFor(spec{intended: intended}, 0, r), "the first attempt counts from its intended start")
	assert.Equal(t, time.Duration(0), queuedFor(spec{intended: intended, retry: true, seq: 1}, 1, r), "a copy sent after the answer counts from its send")
	assert.Equal(t, 30*time.Millisecond, queuedFor(spec{intended: intended, retry: true, seq: 2}, 1, r), "a copy sent at once counts from the intended start")
	assert.Equal(t, time.Duration(0), queuedFor(spec{}, 0, r), "closed model")
	assert.Equal(t, time.Duration(0), queuedFor(spec{intended: sent.Add(time.Millisecond)}, 0, r), "never negative")
}
