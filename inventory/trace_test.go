package inventory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// A coalesced hold is a trace of its own: lock.hold at its root with lock.wait and hold.write
// under it, linked to the request span of each buyer it served, and each buyer's request
// span linked back to it and annotated with its item and outcome. (The same in a real Jaeger,
// with the libraries' Redis and SQL spans: TestTracesInJaeger in the root package.)
func TestTracedHoldLinksTheBuyersItServed(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	lc := locking.New(warmClient(t, srv), &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	gate := make(chan struct{})
	s := newService(t, inventory.Config{DB: db, Locker: gatedLocker{inventory.NewLocker(lc), gate}, Tracer: tp.Tracer("test")})
	t.Cleanup(func() { _ = s.Close() })
	id := resetItems(t, s, 2)[0]

	// Three buyers of two units, each under a request span (otelgin's, in the storefront).
	reqs := make([]inventory.PurchaseRequest, 3)
	ctxs := make([]context.Context, 3)
	buyers := make([]trace.Span, 3)
	for i := range reqs {
		reqs[i] = inventory.PurchaseRequest{ItemID: id, Quantity: 1}
		ctxs[i], buyers[i] = tp.Tracer("test").Start(t.Context(), "POST /api/items/:id/purchase")
	}
	out := batchOf(t, s, gate, ctxs, reqs)
	for _, b := range buyers {
		b.End()
	}
	require.NoError(t, out[0].err)
	require.NoError(t, out[1].err)
	require.ErrorIs(t, out[2].err, inventory.ErrSoldOut)

	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
	}
	require.Len(t, byName[inventory.SpanLockHold], 1, "one hold served the batch")
	hold := byName[inventory.SpanLockHold][0]
	assert.False(t, hold.Parent().IsValid(), "the hold is the root of its own trace")
	attrs := attrsOf(hold)
	assert.Equal(t, id, attrs[inventory.AttrItem].AsInt64())
	assert.Equal(t, out[0].rec.FenceToken, attrs[inventory.AttrToken].AsInt64())
	assert.EqualValues(t, 2, attrs[inventory.AttrBuyers].AsInt64())
	assert.Positive(t, attrs[inventory.AttrLease].AsInt64())

	linked := map[trace.SpanID]bool{}
	for _, l := range hold.Links() {
		linked[l.SpanContext.SpanID()] = true
	}
	for i, b := range buyers[:2] {
		assert.True(t, linked[b.SpanContext().SpanID()], "the hold links buyer %d, whom it served", i)
	}
	assert.False(t, linked[buyers[2].SpanContext().SpanID()], "the buyer answered sold out on the stock read was not served")

	for _, name := range []string{inventory.SpanLockWait, inventory.SpanHoldWrite} {
		require.Len(t, byName[name], 1, name)
		assert.Equal(t, hold.SpanContext().SpanID(), byName[name][0].Parent().SpanID(), "%s is the hold's child", name)
	}
	write := attrsOf(byName[inventory.SpanHoldWrite][0])
	assert.EqualValues(t, 2, write[inventory.AttrBuyers].AsInt64())
	assert.EqualValues(t, 2, write[inventory.AttrUnits].AsInt64())
	assert.Equal(t, out[0].rec.FenceToken, write[inventory.AttrFence].AsInt64())

	outcomes := map[string]int{}
	for _, sp := range byName["POST /api/items/:id/purchase"] {
		a := attrsOf(sp)
		assert.Equal(t, id, a[inventory.AttrItem].AsInt64())
		outcomes[a[inventory.AttrOutcome].AsString()]++
		if a[inventory.AttrOutcome].AsString() == "ordered" {
			require.Len(t, sp.Links(), 1, "a served buyer links to its hold")
			assert.Equal(t, hold.SpanContext().SpanID(), sp.Links()[0].SpanContext.SpanID())
		}
	}
	assert.Equal(t, map[string]int{"ordered": 2, "sold_out": 1}, outcomes)
}

func attrsOf(sp sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// A Redis node's breaker open is one breaker.open span, from the opening to the closing, with
// an event per probe; another node's breaker has its own.
func TestBreakerSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	on := inventory.BreakerSpans(tp.Tracer("test"))
	on("a:6379", locking.BreakerOpen)
	on("b:6379", locking.BreakerOpen)
	on("a:6379", locking.BreakerHalfOpen)
	on("a:6379", locking.BreakerOpen)
	on("a:6379", locking.BreakerHalfOpen)
	on("a:6379", locking.BreakerClosed)
	on("a:6379", locking.BreakerClosed) // closed already: nothing
	ended := rec.Ended()
	require.Len(t, ended, 1, "b's breaker is still open")
	sp := ended[0]
	assert.Equal(t, inventory.SpanBreakerOpen, sp.Name())
	assert.Equal(t, "a:6379", attrsOf(sp)[inventory.AttrNode].AsString())
	var events []string
	for _, e := range sp.Events() {
		events = append(events, e.Name)
	}
	assert.Equal(t, []string{"probe", "probe", "closed"}, events)
	assert.Len(t, rec.Started(), 2)
}
