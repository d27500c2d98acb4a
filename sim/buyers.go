package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/inventory"
)

// answer is one attempt's answer as the API's client would see it, with what linearize
// needs of a refusal for want of stock (the short items).
type answer struct {
	verdict.Answer
	short []int64
	err   error
}

// definite reports whether the answer says what happened (a 2xx, or a 4xx refusal).
func (a answer) definite() bool { return a.Status >= 200 && a.Status < 500 }

// call runs fn on the process of slot as one request: no answer (status 0) when the slot's
// process is dead or dies meanwhile, as a client whose connection dropped.
func (w *world) call(slot int, fn func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error)) answer {
	p := w.proc(slot)
	a := answer{Answer: verdict.Answer{Sent: w.dbNow()}}
	progress.Add(1)
	w.mu.Lock()
	w.ops++
	w.mu.Unlock()
	if p == nil {
		a.Code = "connection refused"
		return a
	}
	ctx, cancel := context.WithTimeout(p.ctx, clientWait)
	defer cancel()
	rec, err := fn(ctx, p.svc)
	if p.isDead() || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		a.Code = "no answer"
		return a
	}
	a.err = err
	if err != nil {
		a.Status, a.Code = handlers.ErrorAnswer(err)
		var short *inventory.ShortLinesError
		if errors.As(err, &short) {
			for _, l := range short.Lines {
				a.short = append(a.short, l.ItemID)
			}
		}
		return a
	}
	a.Status = 201
	if rec.Replayed {
		a.Status = 200
	}
	a.OrderID, a.Strategy = rec.OrderID, rec.Strategy
	for _, l := range rec.Lines {
		a.Lines = append(a.Lines, verdict.Line{ItemID: l.ItemID, Quantity: l.Quantity, Remaining: l.Remaining, FenceToken: l.FenceToken})
	}
	return a
}

// dbNow is the database's clock, which decides a hold's expiry: a confirmation's Sent is on it.
func (w *world) dbNow() time.Time { return time.UnixMilli(w.db.nowMS()) }

// buyer is one buyer's loop: purchases, carts and holds until the buyers stop.
func (w *world) buyer(b int) {
	rng := rand.New(rand.NewPCG(w.plan.Seed, uint64(b)+1))
	saleItems := len(w.plan.Items) - w.plan.HoldItems
	for n := 0; ; n++ {
		time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		if time.Since(w.start) >= w.plan.BuyersEnd {
			return
		}
		key := fmt.Sprintf("b%d-%d", b, n)
		switch r := rng.IntN(100); {
		case r < 45: // a purchase
			item := int64(1)
			if rng.IntN(5) >= 3 {
				item = int64(2 + rng.IntN(saleItems-1))
			}
			w.sale(rng, key, []verdict.Line{{ItemID: item, Quantity: 1 + rng.IntN(3)}}, true, w.work(rng))
		case r < 80: // a cart
			ids := rng.Perm(saleItems)[:2+rng.IntN(2)]
			if w.plan.HotInCarts && !slices.Contains(ids, hotItem) && rng.IntN(5) > 0 {
				ids[0] = hotItem
			}
			var lines []verdict.Line
			for _, i := range ids {
				lines = append(lines, verdict.Line{ItemID: int64(i + 1), Quantity: 1 + rng.IntN(2)})
			}
			slices.SortFunc(lines, func(a, b verdict.Line) int { return int(a.ItemID - b.ItemID) })
			w.sale(rng, key, lines, false, w.work(rng))
		default:
			w.hold(rng, key)
		}
	}
}

// sale sends one purchase (single) or checkout until it has a definite answer, at most three
// attempts under its key, each to a process drawn at random.
// work is a sale's simulated work (a payment call): a hold keeps its lock through it, which
// is where a lease runs out.
func (w *world) work(rng *rand.Rand) time.Duration {
	return time.Duration(rng.IntN(300)) * time.Millisecond
}

func (w *world) sale(rng *rand.Rand, key string, lines []verdict.Line, single bool, work time.Duration) {
	c := &verdict.Cart{Key: key, Lines: lines}
	w.mu.Lock()
	w.carts = append(w.carts, c)
	w.mu.Unlock()
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		}
		a := w.saleAttempt(rng.IntN(w.plan.Procs), key, lines, single, work)
		w.mu.Lock()
		c.Attempts = append(c.Attempts, a.Answer)
		w.mu.Unlock()
		if a.definite() {
			return
		}
	}
}

// saleAttempt sends one attempt of a sale to slot and records it in the history, projected
// on each of its items that no hold touches (as the load test's carts are).
func (w *world) saleAttempt(slot int, key string, lines []verdict.Line, single bool, work time.Duration) answer {
	var calls []*linearize.Call
	for _, l := range lines {
		if w.inHistory(l.ItemID) {
			calls = append(calls, w.rec.Begin(linearize.Purchase{Item: l.ItemID, Quantity: l.Quantity, Key: key}))
		} else {
			calls = append(calls, nil)
		}
	}
	a := w.call(slot, func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error) {
		if single {
			r, err := svc.Purchase(ctx, inventory.PurchaseRequest{ItemID: lines[0].ItemID, Quantity: lines[0].Quantity,
				Strategy: w.plan.Strategy, IdempotencyKey: key, Work: work})
			return inventory.CartReceipt{OrderID: r.OrderID, Strategy: r.Strategy, Replayed: r.Replayed,
				Lines: []inventory.LineReceipt{{ItemID: r.ItemID, Quantity: r.Quantity, Remaining: r.Remaining, FenceToken: r.FenceToken}}}, err
		}
		req := inventory.CheckoutRequest{Strategy: w.plan.Strategy, IdempotencyKey: key, Work: work}
		for _, l := range lines {
			req.Lines = append(req.Lines, inventory.CartLine{ItemID: l.ItemID, Quantity: l.Quantity})
		}
		return svc.Checkout(ctx, req)
	})
	if single && a.Status == 409 && a.Code == "insufficient_stock" {
		a.short = []int64{lines[0].ItemID}
	}
	for i, l := range lines {
		if calls[i] != nil {
			calls[i].End(lineOutcome(a, l.ItemID))
		}
	}
	return a
}

func (w *world) inHistory(item int64) bool {
	return item <= int64(len(w.plan.Items)-w.plan.HoldItems)
}

// lineOutcome is what answer a promises about its line of item id (the load test's rule).
func lineOutcome(a answer, id int64) linearize.Outcome {
	switch {
	case a.Status >= 200 && a.Status < 300:
		for _, l := range a.Lines {
			if l.ItemID == id {
				return linearize.Sold{Remaining: l.Remaining}
			}
		}
		return linearize.Indeterminate{Cause: "the receipt has no line of the item"}
	case a.Status == 409 && a.Code == "insufficient_stock":
		if slices.Contains(a.short, id) {
			return linearize.Insufficient{}
		}
		return linearize.Refused{Code: "another line short"}
	case a.Status == 0:
		return linearize.Indeterminate{Cause: a.Code}
	}
	return linearize.PurchaseOutcome(a.Status, a.Code, 0)
}

// hold places a hold of the hold items, then confirms it (in time or not), cancels it, or
// leaves it to expire.
func (w *world) hold(rng *rand.Rand, key string) {
	first := len(w.plan.Items) - w.plan.HoldItems + 1
	var lines []verdict.Line
	for i := range w.plan.HoldItems {
		if i == 0 || rng.IntN(2) == 0 {
			lines = append(lines, verdict.Line{ItemID: int64(first + i), Quantity: 1 + rng.IntN(2)})
		}
	}
	ttl := time.Duration(1+rng.IntN(8)) * time.Second
	hk := &verdict.HoldKey{Key: key}
	w.mu.Lock()
	w.holdKeys = append(w.holdKeys, hk)
	w.mu.Unlock()
	var placed inventory.StockHold
	for attempt := 0; attempt < 3 && placed.ID == 0; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		}
		a := w.call(rng.IntN(w.plan.Procs), func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error) {
			req := inventory.HoldRequest{TTL: ttl, Strategy: w.plan.Strategy, IdempotencyKey: key}
			for _, l := range lines {
				req.Lines = append(req.Lines, inventory.CartLine{ItemID: l.ItemID, Quantity: l.Quantity})
			}
			h, err := svc.PlaceHold(ctx, req)
			placed = h
			return inventory.CartReceipt{OrderID: h.ID, Replayed: h.Replayed}, err
		})
		w.mu.Lock()
		hk.Answers = append(hk.Answers, verdict.HoldAnswer{Status: a.Status, HoldID: a.OrderID})
		if !a.definite() {
			hk.Unknown = true
		}
		w.mu.Unlock()
		if a.definite() && placed.ID == 0 {
			return
		}
	}
	if placed.ID == 0 {
		return
	}
	h := &verdict.Hold{ID: placed.ID, Lines: lines, ExpiresAt: placed.ExpiresAt}
	w.mu.Lock()
	hk.Unknown = false
	w.holds = append(w.holds, h)
	w.mu.Unlock()
	switch r := rng.IntN(10); {
	case r < 6: // confirm, most often in time
		time.Sleep(time.Duration(rng.Int64N(int64(ttl + ttl/3))))
		for attempt := 0; attempt < 3; attempt++ {
			a := w.call(rng.IntN(w.plan.Procs), func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error) {
				return svc.ConfirmHold(ctx, placed.ID)
			})
			w.mu.Lock()
			h.Confirms = append(h.Confirms, a.Answer)
			w.mu.Unlock()
			if a.definite() {
				return
			}
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		}
		// Unanswered three times: it may have landed. replay asks once more after the run.
		w.mu.Lock()
		w.confirms = append(w.confirms, h)
		w.mu.Unlock()
	case r < 8: // cancel
		time.Sleep(time.Duration(rng.Int64N(int64(ttl))))
		for attempt := 0; attempt < 3; attempt++ {
			a := w.call(rng.IntN(w.plan.Procs), func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error) {
				return inventory.CartReceipt{}, svc.CancelHold(ctx, placed.ID)
			})
			if a.definite() {
				w.mu.Lock()
				h.Cancelled = a.err == nil
				w.mu.Unlock()
				return
			}
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		}
		// Unanswered three times: it may have landed. replay asks once more after the run.
		w.mu.Lock()
		w.cancels = append(w.cancels, h)
		w.mu.Unlock()
	}
}
