package scenario

import (
	"bytes"
	"context"
	"testing"

	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFakeSpike runs a flash sale against the fake: the arrivals ramp, the requests in flight
// are sampled over the run, and latency is counted from the intended starts.
func TestFakeSpike(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
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
