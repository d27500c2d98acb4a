package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/report"
)

// The cart pitfalls of -scenario pitfalls. Their pitfall rows sell through the demo carts'
// checkout (POST /api/lab/checkout, with --demo), their fixes through the shop's POST
// /api/checkout.
const (
	strategyRequestOrder = "request-order" // a cart's locks one at a time, in the order of its lines
	strategyLineByLine   = "line-by-line"  // a cart's lines checked one at a time, written unguarded
	demoCheckoutPath     = "/api/lab/checkout"
	checkoutPath         = "/api/checkout"
)

// demoCartStrategies are the strategies of the demo carts' checkout: GET /api/strategies
// (the purchase strategies) does not list them.
var demoCartStrategies = map[string]bool{strategyRequestOrder: true, strategyLineByLine: true}

// sendCart sends one cart through a: to the demo carts' checkout for a demo cart strategy,
// else to the shop's; headers are name, value pairs. Its result is a purchase's: the status
// and the error code.
func (r *pitfallRun) sendCart(ctx context.Context, a *client.API, strategy string, work time.Duration, lines []client.CartLine, headers ...string) client.PurchaseResult {
	h := http.Header{}
	h.Set("X-Strategy", strategy)
	if work > 0 {
		h.Set("X-Simulated-Work", work.String())
	}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Set(headers[i], headers[i+1])
	}
	path := checkoutPath
	if demoCartStrategies[strategy] {
		path = demoCheckoutPath
	}
	start := time.Now()
	var res client.PurchaseResult
	var body map[string]any
	res.Status, res.Err = a.Do(ctx, http.MethodPost, path, h, map[string]any{"lines": lines}, &body)
	res.Start, res.Latency = start, time.Since(start)
	var ae *storeapi.Error
	switch {
	case res.Err == nil:
	case errors.As(res.Err, &ae):
		res.Code = ae.Code
	case client.IsTimeout(res.Err):
		res.Code = "timeout"
	default:
		res.Code = "transport"
	}
	return res
}

// cartOrder: two carts {A,B} and {B,A} of one unit a line, on two instances. request-order:
// both at once through one barrier, so that each holds its first lock before either asks for
// its second, and neither releases before both lock waits ended: each waits for the other's
// lock until its lock wait ends, both are refused lock_timeout and nothing sells. The fix,
// lock+guard: the first cart (300ms of work) holds both locks (taken in the canonical
// order, all or none), then the second comes, waits for them, and sells too.
func (r *pitfallRun) cartOrder(ctx context.Context) error {
	for _, row := range scripted("cart-order") {
		items, err := resetCatalogue(ctx, config.Config{Items: 2, Stock: 5}, r.apis[0])
		if err != nil {
			return err
		}
		a, b := items[0].ID, items[1].ID
		carts := [][]client.CartLine{{{ItemID: a, Quantity: 1}, {ItemID: b, Quantity: 1}}, {{ItemID: b, Quantity: 1}, {ItemID: a, Quantity: 1}}}
		results := make([]client.PurchaseResult, 2)
		var wg sync.WaitGroup
		if row.Strategy == strategyRequestOrder {
			r.seq++
			name := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
			start := time.Now()
			for i, cart := range carts {
				wg.Go(func() {
					results[i] = r.sendCart(ctx, r.apis[i%len(r.apis)], row.Strategy, 0, cart, "X-Fault", "barrier", "X-Barrier", name)
				})
			}
			wg.Wait()
			row.Detail = fmt.Sprintf("carts {A,B} and {B,A} met at a barrier holding one lock each: %s and %s after %s (the lock wait is %s)",
				answerOf(results[0]), answerOf(results[1]), time.Since(start).Round(10*time.Millisecond), PitfallWait)
			row.Blocked = verdict.AllRefused(answerCounts(results), "lock_timeout", len(results))
		} else {
			wg.Go(func() { results[0] = r.sendCart(ctx, r.apis[0], row.Strategy, 300*time.Millisecond, carts[0]) })
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, held := storeapi.AwaitHolder(actx, r.apis[0].HC, []string{r.apis[0].Base}, a, 5*time.Millisecond)
			cancel()
			wg.Go(func() { results[1] = r.sendCart(ctx, r.apis[1%len(r.apis)], row.Strategy, 0, carts[1]) })
			wg.Wait()
			seen := "sent once the first held its locks"
			if !held {
				seen = "sent after the first was never seen holding its locks"
			}
			row.Detail = fmt.Sprintf("carts {A,B} (300ms of work) and {B,A}, the second %s: %s and %s", seen, answerOf(results[0]), answerOf(results[1]))
			// A cart refused after its whole lock wait: the fix did not sell both.
			row.Blocked = countCode(results, "lock_timeout") > 0
			if created := countCode(results, ""); created != len(results) && !row.Blocked {
				row.Verdict = "NOT SOLD" // the fix sells both carts
			}
		}
		if err := r.finishItems(ctx, row, []int64{a, b}, results); err != nil {
			return err
		}
	}
	return nil
}

// cartLines: one cart of two lines of one unit of an item that has one. line-by-line checks
// each line alone against the stock it read (1 fits 1, twice), then takes both units off:
// stock -1. The fix, guard: the lines are merged (2 units) and checked in the transaction
// that writes them: refused insufficient_stock, nothing sold.
func (r *pitfallRun) cartLines(ctx context.Context) error {
	for _, row := range scripted("cart-lines") {
		id, err := r.reset(ctx, 1)
		if err != nil {
			return err
		}
		res := r.sendCart(ctx, r.apis[0], row.Strategy, 0, []client.CartLine{{ItemID: id, Quantity: 1}, {ItemID: id, Quantity: 1}})
		row.Detail = fmt.Sprintf("one cart, two lines of 1 unit of an item with 1 in stock: %s", answerOf(res))
		if err := r.finishItems(ctx, row, []int64{id}, []client.PurchaseResult{res}); err != nil {
			return err
		}
	}
	return nil
}

// finishItems reads the stats of a row's items (each freshly reset), fills the row's numbers
// (the units sold and the stocks added up) and its verdict over them together, and records
// the row; an item the stats do not show is an error.
func (r *pitfallRun) finishItems(ctx context.Context, row report.PitfallRow, ids []int64, results []client.PurchaseResult) error {
	stats, err := r.apis[0].Stats(ctx)
	if err != nil {
		return fmt.Errorf("%s: GET /api/stats: %w", row.Strategy, err)
	}
	var total verdict.Counts
	var found []string
	for _, st := range stats {
		for _, id := range ids {
			if st.ItemID != id {
				continue
			}
			it := checks.ItemOf(st)
			c := verdict.Between(verdict.Fresh(it), it)
			total.Sold += c.Sold
			total.Oversold += c.Oversold
			total.LostUpdates += c.LostUpdates
			row.Sold += st.SoldUnits
			row.Initial += st.InitialStock
			found = append(found, fmt.Sprint(id))
		}
	}
	if len(found) != len(ids) {
		return fmt.Errorf("%s: GET /api/stats shows items %s of %v", row.Strategy, strings.Join(found, ", "), ids)
	}
	total.Blocked = row.Blocked
	if row.Verdict == "" {
		row.Verdict = total.Verdict()
	}
	row.Answers = answerCounts(results)
	row.OK = row.Verdict == row.Expected
	r.logf("pitfalls: %-18s %-7s %-8s sold %d of %d  %s", row.Strategy, row.Role, row.Verdict, row.Sold, row.Initial, row.Detail)
	r.rows = append(r.rows, row)
	return nil
}
