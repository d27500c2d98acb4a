package main

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
)

// purchase is one logical purchase: one Idempotency-Key, sent once or twice (-retry), and
// replayed after the run when no attempt got an HTTP answer.
type purchase struct {
	Key      string
	ItemID   int64
	Quantity int
	Instance int
	Attempts []purchaseResult
	Replays  []purchaseResult
}

// settled reports whether the outcome of the purchase is known: some attempt or replay got a
// 2xx answer (an order, with its id), or every one got an HTTP answer (errors write nothing).
// A purchase with no 2xx and a request without answer (a client timeout) may or may not have
// an order: it is replayed.
func (p *purchase) settled() bool {
	unanswered := false
	for _, r := range append(append([]purchaseResult{}, p.Attempts...), p.Replays...) {
		if r.Status >= 200 && r.Status < 300 {
			return true
		}
		if r.Status == 0 {
			unanswered = true
		}
	}
	if len(p.Replays) > 0 { // only the last replay tells: the earlier ones had no answer
		return p.Replays[len(p.Replays)-1].Status != 0
	}
	return !unanswered
}

// spec is what the generator decides for one purchase.
type spec struct {
	seq      int
	itemID   int64
	quantity int
	retry    bool
	instance int
	intended time.Time // open model: when the schedule meant it to be sent (openmodel.go); zero in the closed model
}

// workload fires the purchases of one strategy at the instances.
type workload struct {
	cfg      Config
	apis     []*api
	items    []item // items[0] is the hot item
	strategy string // "" sends no X-Strategy (target not in demo mode)
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
	results []*purchase
	// -workload cart and holds (cart.go, holds.go): the checkouts and holds, and every
	// request they sent.
	cartList []*cart
	holdList []*hold
	sends    atomic.Int64
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

func (w *workload) record(r purchaseResult, queued time.Duration) {
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
func (w *workload) next(rng *rand.Rand, seq, instance int) spec {
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
func (w *workload) instanceOf(id int64, instance int) int {
	if order := w.order[id]; len(order) > 0 {
		return order[0]
	}
	return instance
}

// execute sends one purchase and records it. With -retry it is sent twice, the copy where a
// client retrying through a load balancer would reach: the next instance round-robin, the same
// one routed by item. For even purchase numbers both copies go at once (two requests in flight
// with one key), for odd ones one after the other.
func (w *workload) execute(ctx context.Context, s spec) *purchase {
	p := &purchase{Key: fmt.Sprintf("%s-%d", w.keyBase, s.seq), ItemID: s.itemID, Quantity: s.quantity, Instance: s.instance}
	req := purchaseReq{ItemID: s.itemID, Quantity: s.quantity, Key: p.Key, Strategy: w.strategy, Work: w.work}
	other := s
	if w.order == nil {
		other.instance = (s.instance + 1) % len(w.apis)
	}
	switch {
	case s.retry && s.seq%2 == 0:
		var copyRes purchaseResult
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
func (w *workload) send(ctx context.Context, s spec, req purchaseReq) purchaseResult {
	return w.recorded(req, func() purchaseResult {
		r := w.apis[s.instance].purchase(ctx, req)
		if order := w.order[s.itemID]; len(order) > 1 && errors.Is(r.Err, syscall.ECONNREFUSED) {
			first := r.Start
			r = w.apis[order[1]].purchase(ctx, req)
			r.Latency += r.Start.Sub(first)
			r.Start = first
		}
		return r
	})
}

// itemOrders returns, per item, the instances at urls in the order nginx's `hash $item_id
// consistent` tries them, the instances named host:port as in an upstream's server lines.
func itemOrders(urls []string, items []item) (map[int64][]int, error) {
	names := make([]string, len(urls))
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("-route %s: instance URL %q has no host:port", RouteItem, raw)
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

// run fires the workload until -requests purchases are done, -duration has passed or ctx ends.
// A non-nil hold extends the duration until it is closed: a fault under way (-chaos failover)
// needs buyers until its last step (its steps are bounded by faultWait).
func (w *workload) run(ctx context.Context, seed int64, hold <-chan struct{}) time.Duration {
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
		limit = maxPurchases
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
func (w *workload) runClosed(ctx, runCtx context.Context, limit int, seed int64) {
	var seq atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < w.cfg.Concurrency; i++ {
		wg.Add(1)
		go func() { // owner: runClosed, which waits for it
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
			var mine []*purchase
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
				if w.cfg.Workload == WorkloadCart || w.cfg.Workload == WorkloadHolds {
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

// reconcile replays, with the same key, every purchase whose outcome is unknown (no 2xx, and a
// request lost to a client timeout): a 200 shows the original did create an order, a 201 that it
// did not and the replay did, an error that nothing was sold. Bounded: 3 tries per purchase.
func (w *workload) reconcile(ctx context.Context) (replayed, unresolved int) {
	for _, p := range w.results {
		if p.settled() {
			continue
		}
		replayed++
		req := purchaseReq{ItemID: p.ItemID, Quantity: p.Quantity, Key: p.Key, Strategy: w.strategy}
		for try := 0; try < 3 && ctx.Err() == nil && !p.settled(); try++ {
			p.Replays = append(p.Replays, w.buy(ctx, w.apis[(p.Instance+try)%len(w.apis)], req))
		}
		if !p.settled() {
			unresolved++
		}
	}
	return replayed, unresolved
}
