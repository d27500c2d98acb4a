package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/client"
)

// readNow draws whether the next operation of the workload is a read of an item's stock.
func (w *Workload) readNow(rng *rand.Rand) bool {
	return w.rec != nil && w.cfg.Reads > 0 && rng.Float64() < w.cfg.Reads
}

// pickItem draws an item as purchases do: the hot one with probability -hot.
func (w *Workload) pickItem(rng *rand.Rand) int64 {
	if len(w.items) > 1 && rng.Float64() >= w.cfg.Hot {
		return w.items[1+rng.IntN(len(w.items)-1)].ID
	}
	return w.items[0].ID
}

// buy sends one purchase attempt to a and records it in the history.
func (w *Workload) buy(ctx context.Context, a *client.API, req client.PurchaseReq) client.PurchaseResult {
	return w.recorded(req, func() client.PurchaseResult { return a.Purchase(ctx, req) })
}

// recorded runs send, one purchase attempt of req, and records it in the history: invoked
// before send, answered after it.
func (w *Workload) recorded(req client.PurchaseReq, send func() client.PurchaseResult) client.PurchaseResult {
	if w.rec == nil {
		return send()
	}
	call := w.rec.Begin(linearize.Purchase{Item: req.ItemID, Quantity: req.Quantity, Key: req.Key})
	r := send()
	call.End(outcomeOf(r.Err, linearize.PurchaseOutcome(r.Status, r.Code, r.Receipt.Remaining)))
	return r
}

// outcomeOf is what an attempt promises: out, its answer's outcome, unless no byte of it was
// written (client.ErrNotSent: its connection was refused, the instance is down, as after a
// kill -9): then it had no effect, which the history knows, instead of an outcome it must
// place both ways (a storefront killed -chaos kill's way refuses its buyers' connections for
// the seconds of its restart, to thousands of attempts). A request written once stays of
// unknown outcome, whatever the error of a later try.
func outcomeOf(err error, out linearize.Outcome) linearize.Outcome {
	if errors.Is(err, client.ErrNotSent) {
		return linearize.Refused{Code: "not sent: connection refused"}
	}
	return out
}

// read asks a for the stock of item id (GET /api/items/:id) and records it in the history.
func (w *Workload) read(ctx context.Context, a *client.API, id int64) {
	w.reads.Add(1)
	call := w.rec.Begin(linearize.Read{Item: id})
	var it client.Item
	status, err := a.Do(ctx, http.MethodGet, "/api/items/"+strconv.FormatInt(id, 10), nil, nil, &it)
	switch {
	case err == nil:
		call.End(linearize.Stock{Units: it.Stock})
	case client.IsTimeout(err):
		call.Unknown("timeout")
	default:
		call.Unknown(fmt.Sprintf("%d %v", status, oneLine(err.Error())))
	}
}

// oneLine is the first line of s.
func oneLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
