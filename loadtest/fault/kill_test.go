package fault

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// A kill's sales gap is the first 201 of the hot item answered by another instance for a
// request sent after the kill: not the victim's own sale, not a request sent before the kill
// (sold under the dead holder's lock, its answer on its way), not another item's sale. The
// second attempt of a purchase (-retry) went to the next instance.
func TestKillGaps(t *testing.T) {
	start := time.Now()
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	sale := func(inst int, sent, answered float64, item int64) *client.Purchase {
		return &client.Purchase{ItemID: item, Instance: inst, Attempts: []client.PurchaseResult{{Status: 201, Start: at(sent),
			Latency: at(answered).Sub(at(sent)), Receipt: client.Receipt{ItemID: item, Quantity: 1}}}}
	}
	retried := &client.Purchase{ItemID: 3, Instance: 0, Attempts: []client.PurchaseResult{
		{Status: 0, Code: "transport", Start: at(5.1)},
		{Status: 201, Start: at(5.2), Latency: 600 * time.Millisecond, Receipt: client.Receipt{ItemID: 3, Quantity: 1}}}} // at instance 1
	ps := []*client.Purchase{
		sale(1, 0.9, 1.1, 3),  // sent before kill 1
		sale(0, 1.2, 1.3, 3),  // the victim of kill 1, started again
		sale(2, 1.1, 1.4, 4),  // another item
		sale(2, 1.5, 2.05, 3), // kill 1's gap: 1.05s
		sale(1, 1.6, 2.5, 3),
		retried,              // kill 2's gap: 0.8s (attempt 2, at instance 1)
		sale(2, 5.3, 6.0, 3), // later
	}
	k := &KillFigures{Asked: 3, Kills: []Kill{{Instance: 0, At: 1}, {Instance: 2, At: 5}, {Instance: 1, At: 9}}}
	k.settle(start, ps, 3, 3)
	assert.InDelta(t, 1.05, k.Kills[0].GapS, 1e-9)
	assert.InDelta(t, 0.8, k.Kills[1].GapS, 1e-9)
	assert.Equal(t, -1.0, k.Kills[2].GapS, "no sale after kill 3")
	assert.InDelta(t, 1.05, k.WorstGapS, 1e-9)
	assert.InDelta(t, (0.8+1.05)/2, k.MedianGapS, 1e-9)
	assert.True(t, math.IsInf(k.WorstGapMS(), 1), "a kill no survivor sold after misses any gap threshold")
	assert.Equal(t, "3 kill(s) of the hot lock's holder (of 3 asked); sales gaps 1.05s 0.80s never; of the gaps seen: worst 1.05s, median 0.92s (to a request sent after the kill: worst 1.05s, median 0.92s)", k.String())
	require.Len(t, k.Sold, 61)
	assert.Equal(t, 1, k.Sold[11], "the hot item's units sold per 100ms bucket")
	assert.Equal(t, 0, k.Sold[14], "another item's sale is not the hot item's")

	miss := judgeKill(config.Config{}, &Outcome{Event: &Event{Mode: ChaosKill, Kill: k}}, start, nil, true)
	assert.Equal(t, []string{"kill 3: no other instance sold the hot item after it before the run ended"}, miss)
	k.Kills = k.Kills[:2]
	k.settle(start, ps, 3, 3)
	assert.InDelta(t, 1050, k.WorstGapMS(), 1e-6)
	assert.Equal(t, []string{"2 of 3 kill(s) brought: no instance seen holding the hot item's lock in 15s"},
		judgeKill(config.Config{}, &Outcome{Event: &Event{Mode: ChaosKill, Kill: k, Note: "no instance seen holding the hot item's lock in 15s"}}, start, nil, true))
	assert.Empty(t, judgeKill(config.Config{}, &Outcome{}, start, nil, false), "a strategy without a lock has no holder to kill")
}

// With fencing tokens, the gap ends at the first 201 on a survivor under a lock taken after
// the kill (a token above the dead holder's), even for a request sent before it that waited
// in the lock's queue; a sale under an older token, answered after the kill, does not end it.
// The gap to a request sent after the kill is reported beside it.
func TestKillGapsByToken(t *testing.T) {
	start := time.Now()
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	sale := func(inst int, sent, answered float64, token int64) *client.Purchase {
		return &client.Purchase{ItemID: 3, Instance: inst, Attempts: []client.PurchaseResult{{Status: 201, Start: at(sent),
			Latency: at(answered).Sub(at(sent)), Receipt: client.Receipt{ItemID: 3, Quantity: 1, FenceToken: token}}}}
	}
	ps := []*client.Purchase{
		sale(1, 0.95, 1.01, 9), // sold before the kill under token 9, answered after it
		sale(2, 0.5, 2.1, 11),  // waited in the queue, sold under the taken-over lock
		sale(1, 1.2, 2.5, 11),  // sent after the kill
		sale(0, 1.1, 1.9, 12),  // the victim, started again
		sale(2, 2.0, 3.2, 13),
	}
	k := &KillFigures{Asked: 1, Kills: []Kill{{Instance: 0, At: 1, Token: 10}}}
	k.settle(start, ps, 3, 3)
	assert.InDelta(t, 1.1, k.Kills[0].GapS, 1e-9)
	assert.InDelta(t, 1.5, k.Kills[0].SentAfterS, 1e-9)
	assert.Contains(t, k.String(), "sales gaps 1.10s; worst 1.10s, median 1.10s (to a request sent after the kill: worst 1.50s, median 1.50s)")
}
