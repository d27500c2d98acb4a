package workload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// The cart strategies: the strategies the storefront sells carts with (naive only for
// teaching: it places no holds).
var (
	CartStrategies = []string{"naive", "guard", "lock+guard"}
	holdStrategies = []string{"guard", "lock+guard"}
)

// The shape of the carts the workloads draw.
const (
	MaxCartLines = 4    // a cart has 1..maxCartLines lines
	repeatLine   = 0.2  // share of the lines after the first that repeat an item already in the cart
	holdsDirect  = 0.25 // -workload holds: share of the operations that are direct checkouts
)

// mergeCart merges the lines of one item (their quantities added), ascending by item, as the
// server does before it checks anything.
func mergeCart(lines []client.CartLine) []client.CartLine {
	sum := map[int64]int{}
	for _, l := range lines {
		sum[l.ItemID] += l.Quantity
	}
	out := make([]client.CartLine, 0, len(sum))
	for id, q := range sum {
		out = append(out, client.CartLine{ItemID: id, Quantity: q})
	}
	slices.SortFunc(out, func(a, b client.CartLine) int { return cmp.Compare(a.ItemID, b.ItemID) })
	return out
}

// hasItem reports whether the merged cart has a line of item id.
func hasItem(merged []client.CartLine, id int64) bool {
	return slices.ContainsFunc(merged, func(l client.CartLine) bool { return l.ItemID == id })
}

// nextCart draws a cart over items (items[0] the hot one): 1..maxCartLines lines, the first
// of the hot item with probability -hot (else of another), each later one repeating an item
// already in the cart with probability repeatLine, else of any item; 1..-quantity units each.
func (w *Workload) nextCart(rng *rand.Rand, items []client.Item) []client.CartLine {
	n := 1 + rng.IntN(MaxCartLines)
	lines := make([]client.CartLine, 0, n)
	for i := 0; i < n; i++ {
		var id int64
		switch {
		case i == 0 && len(items) > 1 && rng.Float64() >= w.cfg.Hot:
			id = items[1+rng.IntN(len(items)-1)].ID
		case i == 0:
			id = items[0].ID
		case rng.Float64() < repeatLine:
			id = lines[rng.IntN(len(lines))].ItemID
		default:
			id = items[rng.IntN(len(items))].ID
		}
		lines = append(lines, client.CartLine{ItemID: id, Quantity: 1 + rng.IntN(w.cfg.Quantity)})
	}
	return lines
}

// cart is one checkout: one Idempotency-Key, sent once or twice (-retry), and replayed after
// the run when no attempt got an HTTP answer.
type cart struct {
	Key      string
	Lines    []client.CartLine // as sent
	Merged   []client.CartLine // merged per item, ascending
	Instance int
	Hot      bool // the cart has a line of the hot item
	// Single: not a checkout but a single purchase of the hot item (POST
	// /api/items/:id/purchase, -cart-singles), judged as a cart of one line: its order is one.
	Single   bool
	Class    string // lockClass: which of the report's lock-wait columns its answers count in
	Attempts []client.CartResult
	Replays  []client.CartResult
}

// settled reports whether the checkout's outcome is known (as purchase.settled).
func (c *cart) settled() bool {
	unanswered := false
	for _, r := range append(append([]client.CartResult{}, c.Attempts...), c.Replays...) {
		if r.Status >= 200 && r.Status < 300 {
			return true
		}
		if r.Status == 0 {
			unanswered = true
		}
	}
	if len(c.Replays) > 0 {
		return c.Replays[len(c.Replays)-1].Status != 0
	}
	return !unanswered
}

// executeCart sends checkout seq (to instance, and with -retry its copy to the next one, at
// once for even numbers, after for odd ones, as execute does for a purchase) and records it.
// With probability -cart-singles (-workload cart) it is a single purchase of the hot item
// instead. Routed by item (-route item), both copies go to the instance of the cart's routing
// key, its lowest item (client.RouteItem), as deploy/nginx.conf routes its X-Route-Item.
func (w *Workload) executeCart(ctx context.Context, rng *rand.Rand, seq, instance int) *cart {
	c := &cart{Key: fmt.Sprintf("%s-c%d", w.keyBase, seq)}
	if w.cfg.Workload == config.WorkloadCart && w.cfg.CartSingles > 0 && rng.Float64() < w.cfg.CartSingles {
		c.Single = true
		c.Lines = []client.CartLine{{ItemID: w.items[0].ID, Quantity: 1 + rng.IntN(w.cfg.Quantity)}}
	} else {
		c.Lines = w.nextCart(rng, w.items)
	}
	c.Merged = mergeCart(c.Lines)
	c.Hot = hasItem(c.Merged, w.items[0].ID)
	c.Class = lockClass(c.Merged, w.items[0].ID, c.Single)
	c.Instance = w.instanceOf(client.RouteItem(c.Lines), instance)
	retry := w.cfg.Retry > 0 && rng.Float64() < w.cfg.Retry
	other := (c.Instance + 1) % len(w.apis)
	if w.order != nil {
		other = c.Instance
	}
	switch {
	case retry && seq%2 == 0:
		var copyRes client.CartResult
		done := make(chan struct{})
		go func() { // owner: executeCart, which waits on done
			defer close(done)
			copyRes = w.sendCart(ctx, other, c, w.work)
		}()
		r := w.sendCart(ctx, c.Instance, c, w.work)
		<-done
		c.Attempts = append(c.Attempts, r, copyRes)
	case retry:
		c.Attempts = append(c.Attempts, w.sendCart(ctx, c.Instance, c, w.work))
		if ctx.Err() == nil {
			c.Attempts = append(c.Attempts, w.sendCart(ctx, other, c, w.work))
		}
	default:
		c.Attempts = append(c.Attempts, w.sendCart(ctx, c.Instance, c, w.work))
	}
	for _, r := range c.Attempts {
		w.recordCart(r)
	}
	w.done.Add(1)
	return c
}

// sendCart sends one checkout attempt of c to instance inst and records it in the history,
// projected on each of its items: a 2xx is a sale of that line's merged quantity on each item
// (with the line's remaining stock); a 409 that names item X short is a refusal for want of
// stock on X and no operation on the others; an unknown outcome is unknown on every item; any
// other refusal promises nothing. A projection of one atomic operation on each item is a
// necessary condition: every item's history must be linearizable on its own. Routed by item,
// a refused connection is sent to the next instance on the routing key's ring, as send does.
func (w *Workload) sendCart(ctx context.Context, inst int, c *cart, work time.Duration) client.CartResult {
	var calls []*linearize.Call
	if w.rec != nil {
		for _, l := range c.Merged {
			calls = append(calls, w.rec.Begin(linearize.Purchase{Item: l.ItemID, Quantity: l.Quantity, Key: c.Key}))
		}
	}
	r := w.cartAttempt(ctx, w.apis[inst], c, work)
	if order := w.order[client.RouteItem(c.Lines)]; len(order) > 1 && inst == order[0] && errors.Is(r.Err, syscall.ECONNREFUSED) {
		first := r.Start
		r = w.cartAttempt(ctx, w.apis[order[1]], c, work)
		r.Latency += r.Start.Sub(first)
		r.Start = first
	}
	w.sends.Add(1)
	for i, l := range c.Merged {
		if calls == nil {
			break
		}
		calls[i].End(lineOutcome(r, l.ItemID))
	}
	return r
}

// cartAttempt sends c once to a: a checkout, or for a single purchase POST
// /api/items/:id/purchase, its answer told as a cart's (singleResult).
func (w *Workload) cartAttempt(ctx context.Context, a *client.API, c *cart, work time.Duration) client.CartResult {
	if !c.Single {
		return a.Checkout(ctx, c.Lines, c.Key, w.strategy, work)
	}
	l := c.Lines[0]
	return singleResult(a.Purchase(ctx, client.PurchaseReq{ItemID: l.ItemID, Quantity: l.Quantity, Key: c.Key, Strategy: w.strategy, Work: work}), l)
}

// singleResult tells the answer p of a single purchase of line l as a checkout's: its receipt
// an order of that one line, its 409 insufficient_stock naming that line short.
func singleResult(p client.PurchaseResult, l client.CartLine) client.CartResult {
	r := client.CartResult{Status: p.Status, Code: p.Code, Start: p.Start, Latency: p.Latency, Err: p.Err, WorkMS: p.WorkMS, LockMS: p.LockMS}
	if p.Status >= 200 && p.Status < 300 {
		r.Receipt = client.CartReceipt{OrderID: p.Receipt.OrderID, Strategy: p.Receipt.Strategy, Degraded: p.Receipt.Degraded,
			Lines: []client.LineReceipt{{ItemID: l.ItemID, Quantity: l.Quantity, Remaining: p.Receipt.Remaining, FenceToken: p.Receipt.FenceToken}}}
	}
	if p.Code == "insufficient_stock" {
		r.Short = []client.ShortLine{{ItemID: l.ItemID, Requested: l.Quantity}}
	}
	return r
}

// lineOutcome is what the answer r of a checkout promises about its line of item id.
func lineOutcome(r client.CartResult, id int64) linearize.Outcome {
	switch {
	case r.Status >= 200 && r.Status < 300 && r.Code == "":
		for _, l := range r.Receipt.Lines {
			if l.ItemID == id {
				return linearize.Sold{Remaining: l.Remaining}
			}
		}
		return linearize.Indeterminate{Cause: "the receipt has no line of the item"}
	case r.Status == http.StatusConflict && r.Code == "insufficient_stock":
		for _, s := range r.Short {
			if s.ItemID == id {
				return linearize.Insufficient{}
			}
		}
		return linearize.Refused{Code: "another line short"}
	}
	return outcomeOf(r.Err, linearize.PurchaseOutcome(r.Status, r.Code, 0))
}

// recordCart counts one answer of a checkout or a hold request in the latency histogram and
// the counters.
func (w *Workload) recordCart(r client.CartResult) {
	us := max(r.Latency.Microseconds(), 1)
	w.histMu.Lock()
	_ = w.hist.RecordValue(us)
	w.histMu.Unlock()
	switch {
	case r.Status == 201:
		w.created.Add(1)
	case r.Status >= 200 && r.Status < 300, r.Code == "sold_out", r.Code == "insufficient_stock":
	default:
		w.failed.Add(1)
	}
}

// reconcileCarts replays, with the same key, every checkout whose outcome is unknown (as
// reconcile does for purchases). Bounded: 3 tries per checkout.
func (w *Workload) reconcileCarts(ctx context.Context) (replayed, unresolved int) {
	for _, c := range w.cartList {
		if c.settled() {
			continue
		}
		replayed++
		for try := 0; try < 3 && ctx.Err() == nil && !c.settled(); try++ {
			c.Replays = append(c.Replays, w.sendCart(ctx, (c.Instance+try)%len(w.apis), c, 0))
		}
		if !c.settled() {
			unresolved++
		}
	}
	return replayed, unresolved
}

// ErrNoCartStrategy: a cart workload found none of the cart strategies offered.
var ErrNoCartStrategy = errors.New("the servers offer none of the cart strategies (" + strings.Join(CartStrategies, ", ") + ")")

// CartOnly keeps the cart strategies of strategies.
func CartOnly(strategies []string) []string {
	var out []string
	for _, s := range strategies {
		if s == "" || slices.Contains(CartStrategies, s) {
			out = append(out, s)
		}
	}
	return out
}
