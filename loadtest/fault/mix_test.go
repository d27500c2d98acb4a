package fault

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/pgproc"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
)

// TestMixOrderIsAPermutation: every round of the schedule fires each kind exactly once, in a
// random order that differs between rounds.
func TestMixOrderIsAPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	orders := map[string]bool{}
	for round := 0; round < 50; round++ {
		order := mixOrder(rng, mixKinds)
		assert.ElementsMatch(t, mixKinds, order, "round %d", round)
		orders[strings.Join(order, ",")] = true
	}
	assert.Greater(t, len(orders), 40, "a new random order per round")
	assert.Equal(t, []string{mixPause, mixKill}, mixKinds[:2], "mixOrder does not reorder its argument")
}

// TestMixKindsOf: the PostgreSQL restart is drawn only when the run uses the private server.
func TestMixKindsOf(t *testing.T) {
	assert.NotContains(t, mixKindsOf(&cluster.Cluster{}), mixPostgres)
	assert.Len(t, mixKindsOf(&cluster.Cluster{}), len(mixKinds)-1)
	assert.Equal(t, mixKinds, mixKindsOf(&cluster.Cluster{Postgres: &pgproc.Server{}}))
	// -mix-skip leaves kinds out, and only those.
	kinds := mixKindsOf(&cluster.Cluster{Postgres: &pgproc.Server{}}, mixKill, mixPostgres)
	assert.NotContains(t, kinds, mixKill)
	assert.NotContains(t, kinds, mixPostgres)
	assert.Len(t, kinds, len(mixKinds)-2)
}

// TestJudgeMix: a schedule that missed a kind fails the run with a message that says what to
// do; a complete one passes.
func TestJudgeMix(t *testing.T) {
	s := &MixSchedule{Kinds: []string{mixPause, mixClock}, Fired: map[string]int{mixPause: 2}, Missed: []string{mixClock}, Rounds: 0}
	res := &Outcome{Event: &Event{Mode: ChaosMix, Mix: s}}
	missed := judgeMix(config.Config{}, res, time.Time{}, nil, false)
	require.Len(t, missed, 1)
	assert.Contains(t, missed[0], "missed clock")
	assert.Contains(t, missed[0], "-duration")
	assert.Contains(t, s.summary(), "pause×2 clock×0; MISSED clock")

	s.Fired[mixClock], s.Missed, s.Rounds = 1, nil, 1
	assert.Empty(t, judgeMix(config.Config{}, res, time.Time{}, nil, false))
	assert.Contains(t, s.summary(), "in 1 full round(s): pause×2 clock×1; every kind fired")

	assert.NotEmpty(t, judgeMix(config.Config{}, &Outcome{}, time.Time{}, nil, false), "no schedule at all")
	none := &Outcome{Event: &Event{Mode: ChaosMix, Mix: &MixSchedule{Fired: map[string]int{}}}}
	assert.NotEmpty(t, judgeMix(config.Config{}, none, time.Time{}, nil, false), "a schedule with no kind to fire (-mix-skip) fails the run")
}
