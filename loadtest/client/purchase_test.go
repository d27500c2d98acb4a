package client

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSettled(t *testing.T) {
	timeout := PurchaseResult{Code: "timeout"}
	busy := PurchaseResult{Status: 503, Code: "lock_timeout"}
	ok := PurchaseResult{Status: 201}
	for _, c := range []struct {
		attempts, replays []PurchaseResult
		want              bool
	}{
		{[]PurchaseResult{ok}, nil, true},
		{[]PurchaseResult{busy}, nil, true},
		{[]PurchaseResult{timeout}, nil, false},
		{[]PurchaseResult{busy, timeout}, nil, false}, // the copy may have sold
		{[]PurchaseResult{timeout, ok}, nil, true},
		{[]PurchaseResult{timeout}, []PurchaseResult{timeout}, false},
		{[]PurchaseResult{timeout}, []PurchaseResult{timeout, busy}, true},
	} {
		p := &Purchase{Attempts: c.attempts, Replays: c.replays}
		assert.Equal(t, c.want, p.Settled(), "%+v / %+v", c.attempts, c.replays)
	}
}
