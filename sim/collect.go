package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/inventory"
)

// anyProc returns a live process, preferring slot 0.
func (w *world) anyProc() *process {
	for slot := range w.plan.Procs {
		if p := w.proc(slot); p != nil {
			return p
		}
	}
	return nil
}

// probe is the liveness check: once no fault has been active for a while and the buyers have
// stopped, every item with stock left sells one unit to a buyer who keeps asking, through
// each process in turn, until the plan's end. An item that does not is stuck (a hold stuck on
// lock_lost, a lock nobody can take, a queue that never moves).
func (w *world) probe() {
	w.at(w.plan.Probe)
	p := w.anyProc()
	if p == nil {
		w.stuck = append(w.stuck, "no live process to probe with")
		return
	}
	stats, err := p.svc.Stats(context.Background())
	if err != nil {
		w.stuck = append(w.stuck, fmt.Sprintf("stats before the probes: %v", err))
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, s := range stats {
		if s.Stock <= 0 {
			continue
		}
		wg.Go(func() {
			key := fmt.Sprintf("probe-%d", s.ItemID)
			lines := []verdict.Line{{ItemID: s.ItemID, Quantity: 1}}
			c := &verdict.Cart{Key: key, Lines: lines}
			w.mu.Lock()
			w.carts = append(w.carts, c)
			w.mu.Unlock()
			var last answer
			for n := 0; time.Since(w.start) < w.plan.End; n++ {
				last = w.saleAttempt(n%w.plan.Procs, key, lines, true, 0)
				w.mu.Lock()
				c.Attempts = append(c.Attempts, last.Answer)
				w.mu.Unlock()
				if last.Status == 201 || last.Status == 200 {
					return
				}
				time.Sleep(500 * time.Millisecond)
			}
			mu.Lock()
			w.stuck = append(w.stuck, fmt.Sprintf("item %d had %d units in stock from %s and did not sell one by %s; last answer %d %s",
				s.ItemID, s.Stock, w.plan.Probe, w.plan.End, last.Status, last.Code))
			mu.Unlock()
		})
	}
	wg.Wait()
}

// replay asks again, after the run, every sale whose attempts all went unanswered (its
// replay says whether its order exists), and every confirmation and cancellation of a hold
// never answered.
func (w *world) replay() {
	for _, h := range w.confirms {
		if p := w.anyProc(); p != nil {
			a := w.call(p.slot, func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error) {
				return svc.ConfirmHold(ctx, h.ID)
			})
			h.Confirms = append(h.Confirms, a.Answer)
		}
	}
	for _, h := range w.cancels {
		if p := w.anyProc(); p != nil {
			a := w.call(p.slot, func(ctx context.Context, svc *inventory.Service) (inventory.CartReceipt, error) {
				return inventory.CartReceipt{}, svc.CancelHold(ctx, h.ID)
			})
			h.Cancelled = a.err == nil && a.definite()
		}
	}
	for _, c := range w.carts {
		definite := false
		for _, a := range c.Attempts {
			definite = definite || (a.Status >= 200 && a.Status < 500)
		}
		if definite {
			continue
		}
		p := w.anyProc()
		if p == nil {
			return
		}
		a := w.saleAttempt(p.slot, c.Key, c.Lines, len(c.Lines) == 1, 0)
		c.Replays = append(c.Replays, a.Answer)
	}
}

// collect reads the database after the run, through a live process: the items, the orders
// with their lines, and each hold as it stands.
func (w *world) collect(ctx context.Context) (verdict.CartRun, error) {
	p := w.anyProc()
	if p == nil {
		return verdict.CartRun{}, fmt.Errorf("sim: no live process after the run")
	}
	svc := p.svc
	run := verdict.CartRun{Asked: w.plan.Strategy, HoldStrategy: w.plan.Strategy}
	stats, err := svc.Stats(ctx)
	if err != nil {
		return run, fmt.Errorf("sim: stats: %w", err)
	}
	for _, s := range stats {
		run.Items = append(run.Items, verdict.Item{ItemID: s.ItemID, InitialStock: s.InitialStock, Stock: s.Stock,
			SoldUnits: s.SoldUnits, OrderCount: s.OrderCount, HeldUnits: s.HeldUnits})
	}
	var after int64
	for {
		orders, err := svc.ListOrders(ctx, inventory.OrderQuery{AfterID: after, Limit: 1000})
		if err != nil {
			return run, fmt.Errorf("sim: orders: %w", err)
		}
		if len(orders) == 0 {
			break
		}
		ids := make([]int64, len(orders))
		for i, o := range orders {
			ids[i] = o.ID
		}
		lines, err := svc.OrderLines(ctx, ids)
		if err != nil {
			return run, fmt.Errorf("sim: order lines: %w", err)
		}
		for _, o := range orders {
			vo := verdict.Order{OrderID: o.ID, ItemID: o.ItemID, Quantity: o.Quantity, Strategy: o.Strategy,
				FenceToken: o.FenceToken, IdempotencyKey: o.IdempotencyKey, BatchID: o.BatchID, Lines: []verdict.Line{}}
			for _, l := range lines[o.ID] {
				vo.Lines = append(vo.Lines, verdict.Line{ItemID: l.ItemID, Quantity: l.Quantity, Remaining: l.Remaining, FenceToken: l.FenceToken})
			}
			run.Orders = append(run.Orders, vo)
		}
		after = orders[len(orders)-1].ID
	}
	for _, c := range w.carts {
		run.Carts = append(run.Carts, *c)
	}
	for _, h := range w.holds {
		got, err := svc.GetHold(ctx, h.ID)
		if err != nil {
			return run, fmt.Errorf("sim: hold %d: %w", h.ID, err)
		}
		h.Status, h.OrderID = got.Status, got.OrderID
		run.Holds = append(run.Holds, *h)
	}
	for _, k := range w.holdKeys {
		run.HoldKeys = append(run.HoldKeys, *k)
	}
	return run, nil
}
