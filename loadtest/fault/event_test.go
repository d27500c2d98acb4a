package fault

import (
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stretchr/testify/assert"
)

// A failover's holder that wrote is reported as what happened and why it is safe (the fence
// takes each token once), not as a bare "wrote: order N" that reads as a failure.
func TestChaosFailoverHolderWroteWording(t *testing.T) {
	start := time.Now()
	ev := &Event{Mode: ChaosFailover, Instance: 0, Token: 7, FaultAt: 1}
	at := start.Add(1500 * time.Millisecond)
	purchases := []*client.Purchase{{ItemID: 3, Instance: 0, Attempts: []client.PurchaseResult{{Status: 201, Start: at, Latency: time.Millisecond,
		Receipt: client.Receipt{OrderID: 961, ItemID: 3, FenceToken: 7}}}}}
	orders := []client.Order{{OrderID: 961, ItemID: 3, FenceToken: 7, CreatedAt: at}}
	ev.Settle(start, purchases, orders, 2, 3)
	assert.Contains(t, ev.HolderWrote, "order 961, 0.500s after the fault: the holder resumed and finished its purchase")
	assert.Contains(t, ev.HolderWrote, "the fence accepted token 7 once")
	assert.Contains(t, ev.HolderWrote, "safe, not an oversell")
}
