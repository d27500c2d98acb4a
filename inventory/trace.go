package inventory

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/locking"
)

// The names of the spans this package makes (Config.Tracer): what only the storefront knows
// of a purchase. The libraries' spans (the request's, each Redis command's, each SQL
// statement's) come from their own instrumentation, wired by the command.
const (
	// SpanLockWait is the wait for an item's lock (Locker.Obtain): a child of the request's
	// span on the one-purchase-per-hold paths, of the hold's on the coalesced one.
	SpanLockWait = "lock.wait"
	// SpanLockHold is one hold of an item's lock. On the coalesced path (lock+guard,
	// redlock+guard) it is the root of a trace of its own, the item's worker's turn: its
	// lock.wait, the hold's reads, writes and releases are its children, and it links to
	// the request span of every buyer it admitted (each of which links back to it). On the
	// other paths it is a child of the request's span, from the lock obtained to released.
	SpanLockHold = "lock.hold"
	// SpanHoldWrite is one write transaction of a coalesced hold (a streaming hold makes one
	// per token).
	SpanHoldWrite = "hold.write"
	// SpanCartEscalate is a worker taking the locks of carts left waiting too often, every
	// lock in ascending item order, before its hold (coalesce_cart.go, takeStarving).
	SpanCartEscalate = "cart.escalate"
	// SpanBreakerOpen is a Redis node's circuit breaker from open to closed (BreakerSpans).
	SpanBreakerOpen = "breaker.open"
	// SpanEventFenceRefused is the span event of a write the fence refused (a stale token,
	// attributes stockguard.lock.token and stockguard.fence.seen): on the hold.write or
	// lock.hold span that tried it, and on the request span of each buyer it was for.
	SpanEventFenceRefused = "fence.refused"
)

// The attributes of the package's spans and of the request spans it annotates.
const (
	AttrItem     = attribute.Key("stockguard.item")
	AttrItems    = attribute.Key("stockguard.items")
	AttrQuantity = attribute.Key("stockguard.quantity")
	AttrStrategy = attribute.Key("stockguard.strategy")
	AttrOutcome  = attribute.Key("stockguard.outcome")
	AttrToken    = attribute.Key("stockguard.lock.token")
	AttrLease    = attribute.Key("stockguard.lock.lease_ms")
	AttrRenewals = attribute.Key("stockguard.lock.renewals")
	AttrWaited   = attribute.Key("stockguard.lock.waited")
	AttrBuyers   = attribute.Key("stockguard.hold.buyers")
	AttrCarts    = attribute.Key("stockguard.hold.carts")
	AttrUnits    = attribute.Key("stockguard.hold.units")
	AttrFence    = attribute.Key("stockguard.fence")
	AttrSeen     = attribute.Key("stockguard.fence.seen")
	AttrLocks    = attribute.Key("stockguard.locks")
	AttrNode     = attribute.Key("stockguard.redis.node")
)

// noSpan is the span of tracing off: a non-recording span whose methods do nothing.
var noSpan = trace.SpanFromContext(context.Background())

// tracer is the package's seam to OpenTelemetry: a nil tracer is tracing off, and then
// start returns ctx and a span that does nothing, without allocating. Every attribute is
// set behind span.IsRecording(), so that an untraced purchase builds none.
type tracer struct{ tr trace.Tracer }

// start starts name as a child of ctx's span (or as a root with opts' trace.WithNewRoot).
func (t tracer) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.tr == nil {
		return ctx, noSpan
	}
	return t.tr.Start(ctx, name, opts...)
}

// on reports whether spans are made.
func (t tracer) on() bool { return t.tr != nil }

// lockStats is what a Held may tell of its hold (locking.Lock does).
type lockStats interface {
	Lease() time.Duration
	Renewals() int64
}

// holdStarted records on a lock.hold span the lock it holds: its item, token and lease.
func holdStarted(span trace.Span, itemID int64, held Held, waited bool) {
	if !span.IsRecording() || held == nil {
		return
	}
	span.SetAttributes(AttrItem.Int64(itemID), AttrToken.Int64(held.Token()), AttrWaited.Bool(waited))
	if ls, ok := held.(lockStats); ok {
		span.SetAttributes(AttrLease.Int64(ls.Lease().Milliseconds()))
	}
}

// holdEnded ends a lock.hold span with the renewals its lock had.
func holdEnded(span trace.Span, held Held) {
	if span.IsRecording() && held != nil {
		if ls, ok := held.(lockStats); ok {
			span.SetAttributes(AttrRenewals.Int64(ls.Renewals()))
		}
	}
	span.End()
}

// failed marks span failed with err (when err is not nil).
func failed(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
}

// fenceRefused adds the fence.refused event to span when err is a stale fence's refusal.
func fenceRefused(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		addFenceRefused(span, err)
	}
}

// addFenceRefused is fenceRefused's recording half (apart: errors.As's target escapes, and
// would be allocated on every call).
func addFenceRefused(span trace.Span, err error) {
	var stale *staleFenceError
	if errors.As(err, &stale) {
		span.AddEvent(SpanEventFenceRefused, trace.WithAttributes(AttrItem.Int64(stale.itemID),
			AttrToken.Int64(stale.token), AttrSeen.Int64(stale.seen)))
	}
}

// linkServed links a coalesced hold's span and the request span of a buyer it admitted,
// both ways: the hold lists the buyers it served, each buyer's trace points to its hold.
func linkServed(hold trace.Span, w *waiter) {
	if hold == nil || !hold.IsRecording() {
		return
	}
	buyer := trace.SpanFromContext(w.ctx)
	if sc := buyer.SpanContext(); sc.IsValid() {
		hold.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrQuantity.Int(w.p.quantity)}})
	}
	buyer.AddLink(trace.Link{SpanContext: hold.SpanContext()})
}

// annotate sets the item, quantity, strategy and outcome of a purchase on its request's
// span (the span in ctx: otelgin's), when it is recorded.
func (t tracer) annotate(ctx context.Context, req PurchaseRequest, name string, rec Receipt, err error) {
	if !t.on() {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrItem.Int64(req.ItemID), AttrQuantity.Int(req.Quantity), AttrStrategy.String(name),
		AttrOutcome.String(Outcome(rec.Replayed, err)))
}

// annotateCart sets a cart's items and outcome on its request's span, when it is recorded.
func (t tracer) annotateCart(ctx context.Context, req CheckoutRequest, rec CartReceipt, err error) {
	if !t.on() {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	items := make([]int64, len(req.Lines))
	for i, l := range req.Lines {
		items[i] = l.ItemID
	}
	span.SetAttributes(AttrItems.Int64Slice(items), AttrOutcome.String(Outcome(rec.Replayed, err)))
	if rec.Strategy != "" {
		span.SetAttributes(AttrStrategy.String(rec.Strategy))
	}
}

// Outcome names a purchase's or cart's outcome as the API's error codes do: "ordered",
// "replayed", or the code of err's sentinel ("sold_out", "lock_timeout", ...; "error" for
// an unexpected error).
func Outcome(replayed bool, err error) string {
	switch {
	case err == nil && replayed:
		return "replayed"
	case err == nil:
		return "ordered"
	}
	for _, o := range outcomes {
		if errors.Is(err, o.err) {
			return o.name
		}
	}
	return "error"
}

var outcomes = []struct {
	err  error
	name string
}{
	{ErrInvalid, "invalid_request"}, {ErrNotFound, "not_found"}, {ErrSoldOut, "sold_out"},
	{ErrInsufficientStock, "insufficient_stock"}, {ErrIdempotencyConflict, "idempotency_conflict"},
	{ErrOverloaded, "overloaded"}, {ErrLockTimeout, "lock_timeout"}, {ErrLockLost, "lock_lost"},
	{ErrLockNotReplicated, "lock_not_replicated"}, {ErrUnavailable, "unavailable"},
	{context.Canceled, "canceled"}, {context.DeadlineExceeded, "unavailable"},
}

// BreakerSpans returns a locking.BreakerOptions.OnState that makes a breaker.open span of
// each time a Redis node's breaker opens, ended when it closes again (an event for each
// probe, half-open), under tr. A nil tr returns nil: nothing to install.
func BreakerSpans(tr trace.Tracer) func(node string, st locking.BreakerState) {
	if tr == nil {
		return nil
	}
	var mu sync.Mutex
	open := make(map[string]trace.Span)
	return func(node string, st locking.BreakerState) {
		mu.Lock()
		defer mu.Unlock()
		span, isOpen := open[node]
		switch {
		case st == locking.BreakerOpen && !isOpen:
			_, span = tr.Start(context.Background(), SpanBreakerOpen, trace.WithNewRoot(),
				trace.WithAttributes(AttrNode.String(node)))
			open[node] = span
		case st == locking.BreakerHalfOpen && isOpen:
			span.AddEvent("probe")
		case st == locking.BreakerClosed && isOpen:
			span.AddEvent("closed")
			span.End()
			delete(open, node)
		}
	}
}

// waitEnded ends a lock.wait span with the item, the token obtained or the failure.
func waitEnded(span trace.Span, itemID int64, held Held, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrItem.Int64(itemID))
		if held != nil {
			span.SetAttributes(AttrToken.Int64(held.Token()))
		}
		failed(span, err)
	}
	span.End()
}
