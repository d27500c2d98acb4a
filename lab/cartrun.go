//go:build !nodemo

package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/inventory"
)

// The cart pitfalls of the lab, each scripted so that it shows on every run, next to its fix:
//
//   - cart-order: two carts {A,B} and {B,A}, one unit a line, on two instances. With
//     request-order they go at once through the barrier (POST /api/lab/checkout, "X-Fault:
//     barrier"): each holds its first lock before either asks for its second, so each waits
//     for the other's until its lock wait ends, and neither releases before both waits ended:
//     both are refused lock_timeout, nothing sells (BLOCKED). With lock+guard (POST
//     /api/checkout: every lock in the canonical order, all or none) the first cart holds
//     its locks and works, the second waits for them: both sell.
//   - cart-lines: one cart of two lines of item A, each of A's whole stock. With line-by-line
//     each line alone fits the stock read and both are taken off: twice the stock sells
//     (OVERSOLD). With guard the lines are merged and checked in one transaction: the cart
//     is refused insufficient_stock and nothing sells (SAFE).
const (
	caseCartOrder = "cart-order"
	caseCartLines = "cart-lines"
)

// cartCases are the strategies each case runs with: the pitfall first, then the fix.
var cartCases = map[string][2]string{
	caseCartOrder: {inventory.StrategyRequestOrder, inventory.StrategyLockGuard},
	caseCartLines: {inventory.StrategyLineByLine, inventory.StrategyGuard},
}

// labCartRequest is the body of POST /api/lab/carts.
type labCartRequest struct {
	Case     string  `json:"case"`     // cart-order or cart-lines
	Strategy string  `json:"strategy"` // the case's pitfall or its fix (cartCases)
	Items    []int64 `json:"items"`    // cart-order: A and B; cart-lines: A
	WorkMS   int     `json:"work_ms"`  // each cart's simulated work
}

// labCartResult is the answer of a cart run: the carts sent, what they were told, every
// item's numbers, and the verdict over the items together.
type labCartResult struct {
	labCartRequest
	Carts       [][]inventory.CartLine `json:"carts"`
	StartedMS   float64                `json:"started_ms"`
	EndedMS     float64                `json:"ended_ms"`
	Answers     map[string]int         `json:"answers"` // created, or the error code
	Stock       []cartItem             `json:"stock"`
	Sold        int                    `json:"sold"`
	Oversold    int                    `json:"oversold"`
	LostUpdates int                    `json:"lost_updates"`
	Verdict     string                 `json:"verdict"`
	Note        string                 `json:"note"`
}

// cartItem is one item of a cart run, before and after.
type cartItem struct {
	Item   int64 `json:"item"`
	Before int   `json:"stock_before"`
	After  int   `json:"stock_after"`
	Sold   int   `json:"sold"`
}

// carts answers POST /api/lab/carts.
func (l *api) carts(c *gin.Context) {
	serveRun(c, nil, func(ctx context.Context, req labCartRequest) (labCartResult, error) {
		return l.cartRun(ctx, l.instances(c), req)
	})
}

func (r labCartRequest) validate() error {
	strategies, ok := cartCases[r.Case]
	items := 2
	if r.Case == caseCartLines {
		items = 1
	}
	switch {
	case !ok:
		return fmt.Errorf("%w: case must be %q or %q, got %q", inventory.ErrInvalid, caseCartOrder, caseCartLines, r.Case)
	case r.Strategy != strategies[0] && r.Strategy != strategies[1]:
		return fmt.Errorf("%w: case %s runs %s (the pitfall) or %s (its fix), got %q", inventory.ErrInvalid, r.Case, strategies[0], strategies[1], r.Strategy)
	case len(r.Items) != items:
		return invalidField("items", fmt.Sprintf("%d item ids for %s", items, r.Case), r.Items)
	case items == 2 && r.Items[0] == r.Items[1]:
		return fmt.Errorf("%w: the two carts of %s cross two different items", inventory.ErrInvalid, r.Case)
	case r.WorkMS < 0 || r.WorkMS > maxWorkMS:
		return invalidField("work_ms", fmt.Sprintf("an integer from 0 to %d", maxWorkMS), r.WorkMS)
	}
	for _, id := range r.Items {
		if id < 1 {
			return invalidField("items", "positive item ids", r.Items)
		}
	}
	return nil
}

// cartRun runs the case's script against the instances and judges it.
func (l *api) cartRun(ctx context.Context, insts []Instance, req labCartRequest) (labCartResult, error) {
	res := labCartResult{labCartRequest: req, Answers: map[string]int{}}
	first := insts[0].URL
	before := make([]verdict.Item, len(req.Items))
	for i, id := range req.Items {
		var err error
		if before[i], err = l.itemStats(ctx, first, id); err != nil {
			return res, err
		}
	}
	demo := req.Strategy == cartCases[req.Case][0]
	path := "/api/checkout"
	if demo {
		path = "/api/lab/checkout"
	}
	work := time.Duration(req.WorkMS) * time.Millisecond
	res.StartedMS = unixMS(time.Now())
	var answers []answer
	switch req.Case {
	case caseCartOrder:
		a, b := req.Items[0], req.Items[1]
		res.Carts = [][]inventory.CartLine{{{ItemID: a, Quantity: 1}, {ItemID: b, Quantity: 1}},
			{{ItemID: b, Quantity: 1}, {ItemID: a, Quantity: 1}}}
		var headers []string
		if demo {
			headers = []string{handlers.HeaderFault, faultBarrier, handlers.HeaderBarrier, "lab-" + randomName()}
		}
		out := make([]answer, 2)
		var wg sync.WaitGroup
		for i, cart := range res.Carts {
			wg.Go(func() {
				out[i] = l.checkout(ctx, insts[i%len(insts)].URL, path, req.Strategy, work, cart, headers)
			})
			if !demo && i == 0 {
				// The fix: the second cart comes once the first holds its locks, and waits for them.
				l.waitHeld(ctx, first, a, work+labHeldTimeout)
			}
		}
		wg.Wait()
		answers = out
	case caseCartLines:
		if before[0].Stock < 1 {
			return res, &handlers.Error{Status: http.StatusConflict, Code: "sold_out",
				Message: fmt.Sprintf("item %d has no stock left: reset the lab's catalogue", req.Items[0])}
		}
		q := before[0].Stock // each line alone fits the stock; the two together do not
		res.Carts = [][]inventory.CartLine{{{ItemID: req.Items[0], Quantity: q}, {ItemID: req.Items[0], Quantity: q}}}
		answers = []answer{l.checkout(ctx, first, path, req.Strategy, work, res.Carts[0], nil)}
	}
	for _, a := range answers {
		res.Answers[a.code]++
	}
	var total verdict.Counts
	for i, id := range req.Items {
		after, err := l.itemStats(context.WithoutCancel(ctx), first, id)
		if err != nil {
			return res, err
		}
		c := verdict.Between(before[i], after)
		total.Sold += c.Sold
		total.Oversold += c.Oversold
		total.LostUpdates += c.LostUpdates
		res.Stock = append(res.Stock, cartItem{Item: id, Before: before[i].Stock, After: after.Stock, Sold: c.Sold})
	}
	// Crossed carts that each waited their whole lock wait and sold nothing: a deadlock that
	// only the lock wait ended.
	total.Blocked = req.Case == caseCartOrder && total.Sold == 0 && verdict.AllRefused(res.Answers, "lock_timeout", len(answers))
	res.EndedMS = unixMS(time.Now())
	res.Sold, res.Oversold, res.LostUpdates, res.Verdict = total.Sold, total.Oversold, total.LostUpdates, total.Verdict()
	res.Note = cartNote(req, res.Verdict)
	return res, nil
}

// cartNote says what the run showed.
func cartNote(req labCartRequest, v string) string {
	switch {
	case req.Strategy == inventory.StrategyRequestOrder && v == verdict.Blocked:
		return "each cart held its first lock and waited for the other's until its lock wait ended: both refused, nothing sold"
	case req.Strategy == inventory.StrategyLockGuard && v == verdict.Safe:
		return "every lock in one sorted order, all or none: the second cart waited for the first and both sold"
	case req.Strategy == inventory.StrategyLineByLine && v == verdict.Oversold:
		return "each line alone fit the stock read; both were taken off: the cart sold more than there was"
	case req.Strategy == inventory.StrategyGuard && v == verdict.Safe:
		return "the lines were merged and checked in one transaction: the cart was refused, nothing sold"
	}
	return ""
}

// checkout sends one cart to path of the instance at base; headers are name, value pairs.
func (l *api) checkout(ctx context.Context, base, path, strategy string, work time.Duration, lines []inventory.CartLine, headers []string) answer {
	body, _ := json.Marshal(map[string]any{"lines": lines}) // plain values: cannot fail
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return answer{code: "invalid_request", message: err.Error()}
	}
	hr.Header.Set(handlers.HeaderStrategy, strategy)
	hr.Header.Set(handlers.HeaderSimulatedWork, work.String())
	for i := 0; i+1 < len(headers); i += 2 {
		hr.Header.Set(headers[i], headers[i+1])
	}
	resp, err := l.hc.Do(hr)
	if err != nil {
		return answer{code: "unreachable", message: err.Error()}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusCreated {
		return answer{code: "created"}
	}
	var out struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &out) == nil && out.Error.Code != "" {
		return answer{code: out.Error.Code, message: out.Error.Message}
	}
	return answer{code: "http_" + strconv.Itoa(resp.StatusCode)}
}

// randomName is a barrier name of its own for one run.
func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
