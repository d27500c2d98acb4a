// Package workload is what the buyers send during a strategy's run: purchases (closed or open
// model), carts or holds, with retries, replays of unknown outcomes, the recorded history and the
// progress display.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/stockguard/stockguard/internal/chash"
	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

// spec is what the generator decides for one purchase.
type spec struct {
	seq      int
	itemID   int64
	quantity int
	retry    bool
	instance int
	intended time.Time // open model: when the schedule meant it to be sent (openmodel.go); zero in the closed model
}

// Workload fires the purchases of one strategy at the instances.
type Workload struct {
	cfg      config.Config
	apis     []*client.API
	items    []client.Item // items[0] is the hot item
	strategy string        // "" sends no X-Strategy (target not in demo mode)
	work     time.Duration
	keyBase  string
	// order, with -route item, lists per item the instances in the order nginx's consistent
	// hash tries them (internal/chash): every purchase of the item goes to the first, the next
	// one taking over when it refuses the connection. nil: round-robin.
	order map[int64][]int
	rec   *linearize.Recorder // the history of the run's operations (nil: not recorded)

	histMu sync.Mutex
	hist   *hdrhistogram.Histogram // latency of every attempt, in microseconds

	done, created, failed atomic.Int64 // purchases finished, 201s, attempts without 2xx/409
	reads                 atomic.Int64 // reads of an item's stock (history.go)
	missed                atomic.Int64 // open model: arrivals dropped, the in-flight cap was reached
	inFlight              atomic.Int64 // open model: requests in flight (openmodel.go)
	inFlightSeries        []InFlightPoint
	lastSold              atomic.Int64 // when the latest-sent attempt answered 201 was sent (Unix ns)

	resMu   sync.Mutex
	results []*client.Purchase
	// -workload cart and holds (cart.go, holds.go): the checkouts and holds, and every
	// request they sent.
	cartList []*cart
	holdList []*hold
	sends    atomic.Int64
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

func (w *Workload) record(r client.PurchaseResult, queued time.Duration) {
	us := (r.Latency + queued).Microseconds()
	if us < 1 {
		us = 1
	}
	w.histMu.Lock()
	_ = w.hist.RecordValue(us) // values above the highest trackable (10 min) cannot happen: the client times out first
	w.histMu.Unlock()
	switch {
	case r.Status == 201:
		w.created.Add(1)
		for sent := r.Start.UnixNano(); ; {
			last := w.lastSold.Load()
			if sent <= last || w.lastSold.CompareAndSwap(last, sent) {
				break
			}
		}
	case r.Status >= 200 && r.Status < 300, r.Code == "sold_out", r.Code == "insufficient_stock":
	default:
		w.failed.Add(1)
	}
}

// next draws the purchase number seq from rng.
func (w *Workload) next(rng *rand.Rand, seq, instance int) spec {
	s := spec{seq: seq, instance: instance, quantity: 1 + rng.IntN(w.cfg.Quantity)}
	idx := 0
	if len(w.items) > 1 && rng.Float64() >= w.cfg.Hot {
		idx = 1 + rng.IntN(len(w.items)-1)
	}
	s.itemID = w.items[idx].ID
	s.retry = w.cfg.Retry > 0 && rng.Float64() < w.cfg.Retry
	s.instance = w.instanceOf(s.itemID, instance)
	return s
}

// instanceOf returns the instance an operation on item id goes to: routed by item (-route
// item), the first on the item's ring; round-robin, instance, the one the caller picked.
func (w *Workload) instanceOf(id int64, instance int) int {
	if order := w.order[id]; len(order) > 0 {
		return order[0]
	}
	return instance
}

// execute sends one purchase and records it. With -retry it is sent twice, the copy where a
// client retrying through a load balancer would reach: the next instance round-robin, the same
// one routed by item. For even purchase numbers both copies go at once (two requests in flight
// with one key), for odd ones one after the other.
func (w *Workload) execute(ctx context.Context, s spec) *client.Purchase {
	p := &client.Purchase{Key: fmt.Sprintf("%s-%d", w.keyBase, s.seq), ItemID: s.itemID, Quantity: s.quantity, Instance: s.instance}
	req := client.PurchaseReq{ItemID: s.itemID, Quantity: s.quantity, Key: p.Key, Strategy: w.strategy, Work: w.work}
	other := s
	if w.order == nil {
		other.instance = (s.instance + 1) % len(w.apis)
	}
	switch {
	case s.retry && s.seq%2 == 0:
		var copyRes client.PurchaseResult
		done := make(chan struct{})
		go func() { // owner: execute, which waits on done
			defer close(done)
			copyRes = w.send(ctx, other, req)
		}()
		r := w.send(ctx, s, req)
		<-done
		p.Attempts = append(p.Attempts, r, copyRes)
	case s.retry:
		r := w.send(ctx, s, req)
		p.Attempts = append(p.Attempts, r)
		if ctx.Err() == nil {
			p.Attempts = append(p.Attempts, w.send(ctx, other, req))
		}
	default:
		p.Attempts = append(p.Attempts, w.send(ctx, s, req))
	}
	for i, r := range p.Attempts {
		w.record(r, queuedFor(s, i, r))
	}
	w.done.Add(1)
	return p
}

// send sends req to the instance of s. Routed by item, a refused connection (the instance is
// down) is sent to the next instance on the item's ring, as nginx's `proxy_next_upstream error`
// does before the request has reached any (deploy/nginx.conf: two tries); the answer then
// counts from the first try. The history records the tries as one attempt: a refused
// connection reached no server.
func (w *Workload) send(ctx context.Context, s spec, req client.PurchaseReq) client.PurchaseResult {
	return w.recorded(req, func() client.PurchaseResult {
		r := w.apis[s.instance].Purchase(ctx, req)
		if order := w.order[s.itemID]; len(order) > 1 && errors.Is(r.Err, syscall.ECONNREFUSED) {
			first := r.Start
			r = w.apis[order[1]].Purchase(ctx, req)
			r.Latency += r.Start.Sub(first)
			r.Start = first
		}
		return r
	})
}

// itemOrders returns, per item, the instances at urls in the order nginx's `hash $item_id
// consistent` tries them, the instances named host:port as in an upstream's server lines.
func itemOrders(urls []string, items []client.Item) (map[int64][]int, error) {
	names := make([]string, len(urls))
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("-route %s: instance URL %q has no host:port", config.RouteItem, raw)
		}
		names[i] = u.Host
	}
	ring := chash.New(names)
	orders := make(map[int64][]int, len(items))
	for _, it := range items {
		orders[it.ID] = ring.Order(strconv.FormatInt(it.ID, 10))
	}
	return orders, nil
}

// Run fires the workload until -requests purchases are done, -duration has passed or ctx ends.
// A non-nil hold extends the duration until it is closed: a fault under way (-chaos failover)
// needs buyers until its last step (its steps are bounded by fault.StepWait).
func (w *Workload) Run(ctx context.Context, seed int64, hold <-chan struct{}) time.Duration {
	start := time.Now()
	runCtx := ctx
	if w.cfg.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() { // owner: run, whose cancel ends it
			t := time.NewTimer(w.cfg.Duration)
			defer t.Stop()
			select {
			case <-t.C:
			case <-runCtx.Done():
				return
			}
			if hold != nil {
				select {
				case <-hold:
				case <-runCtx.Done():
					return
				}
			}
			cancel()
		}()
	}
	limit := w.cfg.Requests
	if limit == 0 {
		limit = config.MaxPurchases
	}
	if w.cfg.Rate > 0 {
		w.runOpen(ctx, runCtx, limit, seed)
	} else {
		w.runClosed(ctx, runCtx, limit, seed)
	}
	return time.Since(start)
}

// runClosed: Concurrency workers, each sending its next purchase when the previous one is
// answered. Worker i talks to instance i mod N, so requests spread round-robin over the
// instances and a stalled instance stalls only its own workers (as behind a least-busy balancer);
// routed by item, each purchase and read goes to its item's instance instead.
// Requests already sent when the duration ends are let finish (ctx, not runCtx, bounds them).
func (w *Workload) runClosed(ctx, runCtx context.Context, limit int, seed int64) {
	var seq atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < w.cfg.Concurrency; i++ {
		wg.Add(1)
		go func() { // owner: runClosed, which waits for it
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
			var mine []*client.Purchase
			for runCtx.Err() == nil {
				if w.readNow(rng) {
					id := w.pickItem(rng)
					w.read(ctx, w.apis[w.instanceOf(id, i%len(w.apis))], id)
					continue
				}
				n := int(seq.Add(1) - 1)
				if n >= limit {
					break
				}
				inst := i % len(w.apis)
				if w.cfg.Concurrency < len(w.apis) { // fewer workers than instances: rotate
					inst = n % len(w.apis)
				}
				if w.cfg.Workload == config.WorkloadCart || w.cfg.Workload == config.WorkloadHolds {
					w.cartStep(ctx, rng, n, inst)
					continue
				}
				mine = append(mine, w.execute(ctx, w.next(rng, n, inst)))
			}
			w.resMu.Lock()
			w.results = append(w.results, mine...)
			w.resMu.Unlock()
		}()
	}
	wg.Wait()
}

// LastSold returns when the latest-sent attempt answered 201 was sent (Unix ns; 0: none yet).
func (w *Workload) LastSold() int64 { return w.lastSold.Load() }

// New returns the workload of one strategy's run against apis on items (items[0] is the hot
// one), its history recorded: strategy "" sends no X-Strategy (targets not in demo mode), work
// is the X-Simulated-Work of every purchase (0: none), keyBase starts its Idempotency-Keys, and
// routed by item (config.RouteItem) every operation on an item goes to the instance nginx's
// consistent hash picks.
func New(cfg config.Config, apis []*client.API, items []client.Item, strategy string, work time.Duration, keyBase, route string) (*Workload, error) {
	w := &Workload{cfg: cfg, apis: apis, items: items, strategy: strategy, hist: newHistogram(), keyBase: keyBase, work: work}
	if route == config.RouteItem {
		urls := make([]string, len(apis))
		for i, a := range apis {
			urls[i] = a.Base
		}
		var err error
		if w.order, err = itemOrders(urls, items); err != nil {
			return nil, err
		}
	}
	w.rec = linearize.NewRecorder()
	return w, nil
}

// Results returns the purchases of the run (-workload purchase).
func (w *Workload) Results() []*client.Purchase { return w.results }

// Operations returns the recorded history of the run: every attempt and read.
func (w *Workload) Operations() []linearize.Operation { return w.rec.Operations() }

// Histogram returns the latency of every attempt, in microseconds.
func (w *Workload) Histogram() *hdrhistogram.Histogram { return w.hist }

// Missed returns the arrivals the open model dropped at its cap of requests in flight.
func (w *Workload) Missed() int { return int(w.missed.Load()) }

// Reads returns the reads of an item's stock mixed into the run (-reads).
func (w *Workload) Reads() int { return int(w.reads.Load()) }

// InFlight returns the requests in flight over the run (open model; nil otherwise).
func (w *Workload) InFlight() []InFlightPoint { return w.inFlightSeries }

// CartRequests returns the checkouts and holds of a cart workload's run (their keys), and
// every request they sent.
func (w *Workload) CartRequests() (keys, sends int) {
	return len(w.cartList) + len(w.holdList), int(w.sends.Load())
}
