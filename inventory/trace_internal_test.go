package inventory

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// With tracing off (Config.Tracer nil) the package's span seam allocates nothing: every
// helper a purchase, a hold and a write go through is a no-op on the non-recording span, and
// no attribute is built (docs/operations.md, "Tracing").
func TestTracingOffAllocatesNothing(t *testing.T) {
	var tr tracer
	ctx := context.Background()
	w := &waiter{ctx: ctx, p: purchase{itemID: 1, quantity: 1}}
	stale := &staleFenceError{itemID: 1, token: 2, seen: 3}
	other := errors.New("boom")
	req := PurchaseRequest{ItemID: 1, Quantity: 1}
	cart := CheckoutRequest{Lines: []CartLine{{ItemID: 1, Quantity: 1}, {ItemID: 2, Quantity: 1}}}
	allocs := testing.AllocsPerRun(1000, func() {
		hctx, span := tr.start(ctx, SpanLockHold)
		wctx, wspan := tr.start(hctx, SpanLockWait)
		waitEnded(wspan, 1, nil, other)
		holdStarted(span, 1, nil, false)
		linkServed(span, w)
		linkServed(nil, w)
		_, write := tr.start(wctx, SpanHoldWrite)
		fenceRefused(write, stale)
		failed(write, stale)
		write.End()
		holdEnded(span, nil)
		tr.annotate(ctx, req, StrategyLockGuard, Receipt{}, stale)
		tr.annotateCart(ctx, cart, CartReceipt{}, nil)
	})
	assert.Zero(t, allocs, "tracing off: the span seam allocates")
	assert.Nil(t, BreakerSpans(nil), "tracing off: no breaker hook")
}
