//go:build !nodemo

package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/inventory"
)

// Limits of a lab run.
const (
	maxLabBuyers   = 200
	labRunTimeout  = 90 * time.Second // a whole run, stall or pause included
	labHeldTimeout = 2 * time.Second  // past the work: how long a run waits for the stalled purchase's lock
)

// Faults of a lab run.
const (
	faultNone  = ""
	faultStall = "stall" // the first buyer stalls before its write (X-Fault, faults.go)
	faultPause = "pause" // the supervisor SIGSTOPs the item's lock holder during the burst
	faultKill  = "kill"  // the supervisor SIGKILLs the item's lock holder during the burst, and starts it again
	faultCrash = "crash" // the first buyer of setnx-expire dies between SETNX and EXPIRE (X-Fault), alone, before the others start
)

// labRunRequest is the body of POST /api/lab/run.
type labRunRequest struct {
	Strategy string `json:"strategy"`
	Buyers   int    `json:"buyers"`
	WorkMS   int    `json:"work_ms"`
	Quantity int    `json:"quantity"`
	Item     int64  `json:"item"`
	Fault    string `json:"fault"`
}

// labRunResult is the answer of a run: what the buyers were told, and the item before and
// after, from which the verdict follows (internal/verdict, as in the load test).
type labRunResult struct {
	labRunRequest
	StartedMS   float64        `json:"started_ms"` // Unix ms
	EndedMS     float64        `json:"ended_ms"`
	Answers     map[string]int `json:"answers"` // created, or the error code
	Initial     int            `json:"initial_stock"`
	StockBefore int            `json:"stock_before"`
	StockAfter  int            `json:"stock_after"`
	Sold        int            `json:"sold"`         // units of the orders written in the run
	Oversold    int            `json:"oversold"`     // units sold beyond the stock (or below zero), added by the run
	LostUpdates int            `json:"lost_updates"` // units sold that the stock does not show, or the reverse
	Verdict     string         `json:"verdict"`
	Paused      *Paused        `json:"paused,omitempty"`
	Killed      []Killed       `json:"killed,omitempty"`
	// GapMS is, after a kill, the time from the SIGKILL to the first purchase of the item an
	// instance that was not killed answered 201 (the sales gap); absent when none did.
	GapMS *float64 `json:"gap_ms,omitempty"`
	Note  string   `json:"note,omitempty"`
}

// run answers POST /api/lab/run: a burst of purchases, round-robin across the instances,
// with the chosen fault; it answers once every buyer has its answer.
func (l *api) run(c *gin.Context) {
	serveRun(c, func(req labRunRequest) error {
		switch {
		case req.Fault == faultPause && l.sup == nil:
			return errPauseUnsupported
		case req.Fault == faultKill && l.sup == nil:
			return errKillUnsupported
		}
		return nil
	}, func(ctx context.Context, req labRunRequest) (labRunResult, error) {
		return l.burst(ctx, l.instances(c), req, func(ctx context.Context) ([]Killed, string) {
			if takes, known := l.takesLock(ctx, l.instances(c)[0].URL, req.Strategy); known && !takes {
				return nil, "nothing to kill: the strategy takes no lock, so no instance holds one"
			}
			return l.killHolders(ctx, []int64{req.Item})
		})
	})
}

// serveRun answers a lab run's request: it decodes and validates the request (each error
// answered in the API's one shape, before anything is sold), checks it against what this
// process can do (check, nil for none), runs it under the lab's bound, and answers the result.
func serveRun[Req interface{ validate() error }, Res any](c *gin.Context, check func(Req) error,
	run func(context.Context, Req) (Res, error)) {
	var req Req
	if err := handlers.DecodeJSON(c.Request.Body, &req); err != nil {
		handlers.WriteError(c, err)
		return
	}
	if err := req.validate(); err != nil {
		handlers.WriteError(c, err)
		return
	}
	if check != nil {
		if err := check(req); err != nil {
			handlers.WriteError(c, err)
			return
		}
	}
	// The run may outlast the server's write timeout (a stall lasts three leases).
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(labRunTimeout + 10*time.Second))
	ctx, cancel := context.WithTimeout(c.Request.Context(), labRunTimeout)
	defer cancel()
	res, err := run(ctx, req)
	if err != nil {
		handlers.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, res)
}

// validate checks every field of a run against its range, before anything is sold: each
// error names the field and its bounds (inventory.ErrInvalid: 400 invalid_request).
func (r labRunRequest) validate() error {
	switch {
	case r.Buyers < 1 || r.Buyers > maxLabBuyers:
		return invalidField("buyers", fmt.Sprintf("an integer from 1 to %d", maxLabBuyers), r.Buyers)
	case r.WorkMS < 0 || r.WorkMS > maxWorkMS:
		return invalidField("work_ms", fmt.Sprintf("an integer from 0 to %d", maxWorkMS), r.WorkMS)
	case r.Quantity < 1 || r.Quantity > inventory.MaxQuantity:
		return invalidField("quantity", fmt.Sprintf("an integer from 1 to %d", inventory.MaxQuantity), r.Quantity)
	case r.Item < 1:
		return invalidField("item", "a positive item id", r.Item)
	case r.Fault != faultNone && r.Fault != faultStall && r.Fault != faultPause && r.Fault != faultKill && r.Fault != faultCrash:
		return fmt.Errorf("%w: fault must be \"\", %q, %q, %q or %q, got %q", inventory.ErrInvalid, faultStall, faultPause, faultKill, faultCrash, r.Fault)
	case r.Fault == faultCrash && r.Strategy != inventory.StrategySetnxExpire:
		return fmt.Errorf("%w: the crash fault applies to %s only", inventory.ErrInvalid, inventory.StrategySetnxExpire)
	}
	return nil
}

// maxWorkMS is the longest simulated work of a lab buyer, in milliseconds (the storefront's
// X-Simulated-Work bound).
const maxWorkMS = int(inventory.MaxWork / time.Millisecond)

// invalidField is the error of a number out of its range: "invalid request: FIELD must be
// WANT, got GOT".
func invalidField(field, want string, got any) error {
	return fmt.Errorf("%w: %s must be %s, got %v", inventory.ErrInvalid, field, want, got)
}

// answer is what one buyer was told, by which instance, when.
type answer struct {
	code, message string
	inst          int
	at            time.Time
}

// burst runs req's buyers round-robin across insts, with its fault; kill, for the kill fault,
// kills the holder (or the holders of several items at once: the kill lesson) and returns
// every instance it killed.
func (l *api) burst(ctx context.Context, insts []Instance, req labRunRequest, kill func(context.Context) ([]Killed, string)) (labRunResult, error) {
	res := labRunResult{labRunRequest: req, Answers: map[string]int{}}
	first := insts[0].URL
	before, err := l.itemStats(ctx, first, req.Item)
	if err != nil {
		return res, err
	}
	res.StartedMS = unixMS(time.Now())
	answers := make(chan answer, req.Buyers)
	var wg sync.WaitGroup
	buy := func(i int, fault string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- l.purchase(ctx, insts[i%len(insts)], req, fault)
		}()
	}
	next := 0
	if req.Fault == faultCrash {
		// The crashing buyer goes first and alone, and answers at once (it died holding the
		// key it set without a TTL); then the others meet that key.
		answers <- l.purchase(ctx, insts[0], req, faultCrash)
		next = 1
	}
	if req.Fault == faultStall {
		// The stalled buyer goes first and alone: once it holds the lock, the others queue
		// behind it, and one of them takes the lock when its lease runs out.
		buy(0, faultStall)
		next = 1
		l.waitHeld(ctx, first, req.Item, time.Duration(req.WorkMS)*time.Millisecond+labHeldTimeout)
	}
	for i := next; i < req.Buyers; i++ {
		buy(i, faultNone)
	}
	var killed []Killed
	switch req.Fault {
	case faultPause:
		res.Paused, res.Note = l.pauseHolder(ctx, first, req)
	case faultKill:
		killed, res.Note = kill(ctx)
		for _, k := range killed {
			if k.Item == req.Item {
				res.Killed = append(res.Killed, k)
			}
		}
	}
	wg.Wait()
	close(answers)
	var invalid *answer
	var all []answer
	for a := range answers {
		res.Answers[a.code]++
		if a.code == "invalid_request" && invalid == nil {
			invalid = &a
		}
		all = append(all, a)
	}
	res.GapMS = salesGap(killed, all)
	if len(killed) > 0 {
		first = l.liveBase(ctx, killed) // the first instance may be the one killed
	}
	if invalid != nil && res.Answers["invalid_request"] == req.Buyers {
		// The storefront's own answer, already worded "invalid request: ...".
		return res, &handlers.Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: invalid.message}
	}
	after, err := l.itemStats(context.WithoutCancel(ctx), first, req.Item)
	if err != nil {
		return res, err
	}
	res.EndedMS = unixMS(time.Now())
	res.Initial, res.StockBefore, res.StockAfter = after.InitialStock, before.Stock, after.Stock
	counts := verdict.Between(before, after) // the load test's judgement, on this item
	// The crash fault's buyer died holding a key without a TTL: the others all waited their
	// whole lock wait and were refused.
	counts.Blocked = req.Fault == faultCrash && counts.Sold == 0 &&
		verdict.AllRefused(res.Answers, "lock_timeout", req.Buyers-1)
	res.Sold, res.Oversold, res.LostUpdates, res.Verdict = counts.Sold, counts.Oversold, counts.LostUpdates, counts.Verdict()
	if res.Verdict == verdict.Blocked {
		res.Note = "the crashed holder's key has no TTL: every later buyer waited its whole lock wait and was refused; " +
			"the item stays blocked until the key is deleted by hand (the lab's reset deletes it)"
	}
	return res, nil
}

// salesGap returns the time from the kill to the first 201 answered by an instance that
// was not killed, in ms; nil without a kill or without such an answer.
func salesGap(killed []Killed, answers []answer) *float64 {
	if len(killed) == 0 {
		return nil
	}
	dead := map[int]bool{}
	for _, k := range killed {
		dead[k.Instance] = true
	}
	at := killed[0].AtMS
	var gap *float64
	for _, a := range answers {
		if t := unixMS(a.at); a.code == "created" && !dead[a.inst] && t > at && (gap == nil || t-at < *gap) {
			g := t - at
			gap = &g
		}
	}
	return gap
}

// liveBase returns the URL of an instance whose process was not killed (a survivor, or one
// started again), to read the item's numbers after a kill: a killed one's URL is gone. It
// waits for one to be back when every instance was killed.
func (l *api) liveBase(ctx context.Context, killed []Killed) string {
	dead := map[int]bool{}
	for _, k := range killed {
		dead[k.PID] = true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 40*time.Second)
	defer cancel()
	for {
		for _, in := range l.sup.Instances() {
			if in.URL != "" && !dead[in.PID] {
				return in.URL
			}
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// purchase sends one purchase of the run to the instance in.
func (l *api) purchase(ctx context.Context, in Instance, req labRunRequest, fault string) (a answer) {
	defer func() { a.inst, a.at = in.Index, time.Now() }()
	base := in.URL
	body := []byte(`{"quantity":` + strconv.Itoa(req.Quantity) + `}`)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost,
		base+"/api/items/"+strconv.FormatInt(req.Item, 10)+"/purchase", bytes.NewReader(body))
	if err != nil {
		return answer{code: "invalid_request", message: err.Error()}
	}
	if req.Strategy != "" {
		hr.Header.Set(handlers.HeaderStrategy, req.Strategy)
	}
	hr.Header.Set(handlers.HeaderSimulatedWork, (time.Duration(req.WorkMS) * time.Millisecond).String())
	if fault != faultNone {
		hr.Header.Set(handlers.HeaderFault, fault)
	}
	resp, err := l.hc.Do(hr)
	if err != nil {
		return answer{code: "unreachable", message: err.Error()}
	}
	defer resp.Body.Close()
	var out struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusCreated:
		return answer{code: "created"}
	case resp.StatusCode == http.StatusOK:
		return answer{code: "replayed"}
	case json.Unmarshal(data, &out) == nil && out.Error.Code != "":
		return answer{code: out.Error.Code, message: out.Error.Message}
	default:
		return answer{code: "http_" + strconv.Itoa(resp.StatusCode)}
	}
}

// itemStats reads one item's sales numbers (its row of GET /api/stats) from the instance at
// base.
func (l *api) itemStats(ctx context.Context, base string, item int64) (verdict.Item, error) {
	var stats []inventory.ItemStats
	if err := l.getJSON(ctx, base, "/api/stats", &stats); err != nil {
		return verdict.Item{}, err
	}
	for _, st := range stats {
		if st.ItemID == item {
			return verdict.Item{ItemID: st.ItemID, InitialStock: st.InitialStock, Stock: st.Stock,
				SoldUnits: st.SoldUnits, OrderCount: st.OrderCount}, nil
		}
	}
	return verdict.Item{}, fmt.Errorf("%w: item %d", inventory.ErrNotFound, item)
}

// waitHeld waits, up to limit, until the instance at base holds item's lock.
func (l *api) waitHeld(ctx context.Context, base string, item int64, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	// On timeout, a strategy without a lock: the stall still holds the first buyer back.
	_, _ = storeapi.AwaitHolder(ctx, l.hc, []string{base}, item, 10*time.Millisecond)
}

// pauseHolder asks the supervisor to pause the item's lock holder as soon as there is one.
func (l *api) pauseHolder(ctx context.Context, base string, req labRunRequest) (*Paused, string) {
	if takes, known := l.takesLock(ctx, base, req.Strategy); known && !takes {
		return nil, "nothing to pause: the strategy takes no lock, so no instance holds one"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		p, err := l.sup.Pause(ctx, req.Item)
		if err == nil {
			return &p, ""
		}
		if !errors.Is(err, ErrNotHeld) {
			return nil, "pause failed: " + err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, "no instance was seen holding the item's lock: the burst was over before one took it"
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// takesLock tells whether the strategy name ("": the default) of the instance at base takes
// a per-item lock (GET /api/strategies' takes_lock); known is false when the instance does
// not say.
func (l *api) takesLock(ctx context.Context, base, name string) (takes, known bool) {
	list, err := storeapi.Strategies(ctx, l.hc, base)
	if err != nil {
		return false, false
	}
	for _, st := range list {
		if st.Name == name || (name == "" && st.Default) {
			return st.TakesLock, true
		}
	}
	return false, false
}

// getJSON reads path of the instance at base; any failure is the instance being unavailable.
func (l *api) getJSON(ctx context.Context, base, path string, v any) error {
	if err := storeapi.GetJSON(ctx, l.hc, base, path, v); err != nil {
		return fmt.Errorf("%w: lab instance %s: %w", inventory.ErrUnavailable, base, err)
	}
	return nil
}

func unixMS(t time.Time) float64 { return float64(t.UnixMicro()) / 1000 }

// newLabClient is the HTTP client of the lab's own requests to its instances (loopback):
// enough idle connections for a whole burst.
func newLabClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: maxLabBuyers,
		IdleConnTimeout:     30 * time.Second,
	}}
}
