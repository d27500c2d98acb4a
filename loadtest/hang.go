package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The hang faults: -chaos redis-hang stops the run's redis-server, -chaos db-hang its private
// PostgreSQL server (the postmaster and every backend), with SIGSTOP for -hang-for, then
// SIGCONT. Connections stay open and nothing answers: what a hung host or a full stop-the-world
// looks like to the storefronts, not a refused connection.

// The hang timeline of one strategy's run, from its start: the healthy window is
// [hangWarmUp, hangWarmUp+hangHealthy), the process is stopped hangGap after its end, and the hung window
// starts hangSettle after the stop (the breaker has had time to open) and ends at the SIGCONT.
const (
	hangWarmUp  = 500 * time.Millisecond
	hangHealthy = 2 * time.Second
	hangSettle  = 1500 * time.Millisecond
	// hangGap separates the healthy window from the stop: a purchase of the healthy window
	// must be answered before the stop to count, and few take longer than that.
	hangGap = 500 * time.Millisecond
	// hangAfter is how long the run goes on after the SIGCONT (locked sales must be back within
	// hangBackWithin).
	hangAfter      = 6 * time.Second
	hangBackWithin = 5 * time.Second
	// hangFailWithin bounds every answer of the hung window under --on-redis-down fail.
	hangFailWithin = time.Second
	// hangShedWithin bounds the p99 of the at_capacity answers while the database hangs.
	hangShedWithin = time.Second
)

// HangFigures are the figures of one strategy's run under -chaos redis-hang or db-hang.
type HangFigures struct {
	Target      string  `json:"target"`                  // "redis" or "postgres"
	Policy      string  `json:"on_redis_down,omitempty"` // redis-hang: the storefronts' --on-redis-down
	TakesLock   bool    `json:"takes_lock"`              // the strategy takes a Redis lock
	StoppedAt   float64 `json:"stopped_at_s"`            // SIGSTOP, since the run began
	ContinuedAt float64 `json:"continued_at_s"`          // SIGCONT, since the run began

	Healthy Window `json:"healthy"` // purchases sent in the healthy window and answered before the stop (redis-hang)
	Hung    Window `json:"hung"`    // redis-hang: sent from hangSettle after the stop to the SIGCONT and answered before it; db-hang: sent from the stop to the SIGCONT
	// Caught are the purchases in flight at the stop (sent before it, answered after), and
	// CaughtMaxMS the slowest of them: what the hang did to the purchases it caught.
	Caught      int     `json:"caught"`
	CaughtMaxMS float64 `json:"caught_max_ms"`
	// HeldOver counts the sales of the hung window under a lock (not degraded) whose fencing
	// token was issued before the stop (a hold taken before it, still selling); NewLocks those
	// with a later token: a lock taken from a stopped Redis, which cannot be (0 expected).
	HeldOver int `json:"held_over"`
	NewLocks int `json:"new_locks"`
	// LockedBackS is the time from the SIGCONT to the first sale under the lock (a 201 without
	// degraded, sent after the SIGCONT); -1: none. redis-hang, strategies that take a lock.
	LockedBackS float64 `json:"locked_back_s"`
	// ResumedS is the time from the SIGCONT to the first 201 answered after it; -1: none.
	ResumedS float64 `json:"resumed_s"`
	// db-hang: the --max-purchases of each instance, and the most purchases the client had in
	// flight at one instance during the hang that were not answered at_capacity (an upper
	// bound of what the instance admitted: a request is in flight at the client longer than
	// at the server).
	MaxPurchases int `json:"max_purchases,omitempty"`
	MostAdmitted int `json:"most_admitted,omitempty"`
	Oversold     int `json:"oversold_units"`

	// AdmittedBy says where MostAdmitted was measured: "server" (the instances' access logs,
	// exact to the millisecond) or "client" (an upper bound: the instances' logs unread).
	AdmittedBy string `json:"admitted_by,omitempty"`

	Misses []string `json:"misses,omitempty"` // the targets missed (empty: all met)
	Judged bool     `json:"judged"`           // the targets apply to this strategy

	logs []string // db-hang: the instances' log files, read after the run
}

// Window is what the purchases sent in a time window got.
type Window struct {
	FromS      float64        `json:"from_s"` // since the run began
	ToS        float64        `json:"to_s"`
	Sent       int            `json:"sent"`
	ReqPerSec  float64        `json:"req_per_s"`
	P99MS      float64        `json:"p99_ms"`
	MaxMS      float64        `json:"max_ms"`
	Sold       int            `json:"sold"`     // 201s
	Degraded   int            `json:"degraded"` // 201s sold by the guard alone (the receipt's degraded)
	S5xx       int            `json:"5xx"`
	Codes      map[string]int `json:"codes,omitempty"`    // error answers by code ("timeout", "transport": no answer)
	AtCapacity int            `json:"at_capacity"`        // 503 at_capacity answers
	ShedP99MS  float64        `json:"at_capacity_p99_ms"` // p99 of the at_capacity answers
	Slowest503 float64        `json:"slowest_503_ms"`     // slowest 503 answer
	Non503     int            `json:"non_503"`            // answers other than 503
}

// hangAttempt is one attempt, with the instance it was sent to.
type hangAttempt struct {
	r        purchaseResult
	instance int
}

// hangAttempts lists every attempt of purchases, with its instance (attempt k of a purchase
// went to instance (Instance+k) mod n round-robin, to Instance routed by item).
func hangAttempts(purchases []*purchase, instances int, byItem bool) []hangAttempt {
	var out []hangAttempt
	for _, p := range purchases {
		for k, r := range p.Attempts {
			in := p.Instance
			if !byItem {
				in = (p.Instance + k) % max(instances, 1)
			}
			out = append(out, hangAttempt{r: r, instance: in})
		}
	}
	return out
}

// heldOver sorts the sales under a lock sent in [from, to) and answered before to by their
// fencing token: issued before stop (the highest token of the item in an answer to a purchase
// sent before it) or after.
func heldOver(as []hangAttempt, stop, from, to time.Time) (held, fresh int) {
	before := map[int64]int64{}
	for _, a := range as {
		if a.r.Start.Before(stop) && a.r.Receipt.FenceToken > 0 {
			before[a.r.Receipt.ItemID] = max(before[a.r.Receipt.ItemID], a.r.Receipt.FenceToken)
		}
	}
	for _, a := range as {
		r := a.r
		if r.Start.Before(from) || !r.Start.Before(to) || !r.Start.Add(r.Latency).Before(to) || r.Status != 201 || r.Receipt.Degraded {
			continue // outside the hung window (sent in it and answered before the SIGCONT), or not a locked sale
		}
		if r.Receipt.FenceToken == 0 || r.Receipt.FenceToken > before[r.Receipt.ItemID] {
			fresh++
		} else {
			held++
		}
	}
	return held, fresh
}

// caught returns how many attempts were in flight at the stop (sent before, answered after
// it), and the slowest of them in milliseconds.
func caught(as []hangAttempt, stop time.Time) (int, float64) {
	n, slowest := 0, time.Duration(0)
	for _, a := range as {
		if a.r.Start.Before(stop) && a.r.Start.Add(a.r.Latency).After(stop) {
			n++
			slowest = max(slowest, a.r.Latency)
		}
	}
	return n, ms(slowest)
}

// window returns the figures of the attempts sent in [from, to) (all since the run began),
// and answered before answeredBy when it is not 0.
func window(as []hangAttempt, start time.Time, from, to, answeredBy time.Duration) Window {
	w := Window{FromS: from.Seconds(), ToS: to.Seconds(), Codes: map[string]int{}}
	var lat, shed []time.Duration
	for _, a := range as {
		at := a.r.Start.Sub(start)
		if at < from || at >= to || (answeredBy > 0 && at+a.r.Latency >= answeredBy) {
			continue
		}
		r := a.r
		w.Sent++
		lat = append(lat, r.Latency)
		switch {
		case r.Status == 201:
			w.Sold++
			if r.Receipt.Degraded {
				w.Degraded++
			}
		case r.Status >= 500:
			w.S5xx++
		}
		if r.Status == 503 {
			w.Slowest503 = max(w.Slowest503, ms(r.Latency))
		} else {
			w.Non503++
		}
		if r.Code == "at_capacity" {
			w.AtCapacity++
			shed = append(shed, r.Latency)
		}
		if r.Code != "" {
			w.Codes[r.Code]++
		}
	}
	if to > from {
		w.ReqPerSec = float64(w.Sent) / (to - from).Seconds()
	}
	w.P99MS, w.MaxMS = p99(lat), maxOf(lat)
	w.ShedP99MS = p99(shed)
	return w
}

// p99 returns the 99th percentile of d in milliseconds (0 when empty).
func p99(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return ms(d[min(len(d)-1, len(d)*99/100)])
}

func maxOf(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	return ms(slices.Max(d))
}

// firstAfter returns the time from t to the earliest answer of an attempt sent at or after t
// that ok accepts, or -1.
func firstAfter(as []hangAttempt, t time.Time, ok func(purchaseResult) bool) float64 {
	best := time.Duration(-1)
	for _, a := range as {
		if a.r.Start.Before(t) || !ok(a.r) {
			continue
		}
		if d := a.r.Start.Add(a.r.Latency).Sub(t); best < 0 || d < best {
			best = d
		}
	}
	if best < 0 {
		return -1
	}
	return best.Seconds()
}

// mostAdmitted returns, per instance, the most attempts in flight at once at an instant of
// [from, to) that were not answered at_capacity (sent before from too; an attempt with no
// answer counts until it gave up). Seen by the client, an attempt is in flight a little longer
// than at the server: the figure is an upper bound of what the instance admitted.
func mostAdmitted(as []hangAttempt, from, to time.Time) int {
	type edge struct {
		at time.Time
		d  int
	}
	per := map[int][]edge{}
	for _, a := range as {
		end := a.r.Start.Add(a.r.Latency)
		if !a.r.Start.Before(to) || end.Before(from) || a.r.Code == "at_capacity" {
			continue
		}
		per[a.instance] = append(per[a.instance], edge{a.r.Start, 1}, edge{end, -1})
	}
	most := 0
	for _, es := range per {
		es = append(es, edge{from, 0}) // the count at from itself
		slices.SortFunc(es, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.d - b.d // an end before a start at the same instant
		})
		n := 0
		for _, e := range es {
			n += e.d
			if !e.at.Before(from) && e.at.Before(to) {
				most = max(most, n)
			}
		}
	}
	return most
}

// serverAdmitted returns the most purchases one instance served at once at an instant of
// [from, to) and did not answer at_capacity, read from the instances' access logs (one file per
// instance: an answered request's line carries its time and duration). A request still
// unanswered when the log is read is not there: read it after the run.
func serverAdmitted(logs []string, from, to time.Time) (int, error) {
	most := 0
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		var as []hangAttempt
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, " msg=request ") || !strings.Contains(line, "/purchase ") {
				continue
			}
			end, err := time.Parse(time.RFC3339Nano, logField(line, "time"))
			if err != nil {
				continue
			}
			d, err := time.ParseDuration(logField(line, "duration"))
			if err != nil {
				continue
			}
			// The line's time is to the millisecond: each request is narrowed to the whole
			// milliseconds it surely covered, so that two that did not overlap never seem to.
			as = append(as, hangAttempt{r: purchaseResult{Start: end.Add(-d).Truncate(time.Millisecond).Add(time.Millisecond),
				Latency: max(0, d.Truncate(time.Millisecond)-time.Millisecond), Code: logField(line, "code")}})
		}
		most = max(most, mostAdmitted(as, from, to))
	}
	return most, nil
}

// logField returns the value of key in a slog text line ("" when absent; unquoted values).
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		if !strings.HasPrefix(line, key+"=") {
			return ""
		}
		i = -1
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// hangFigures computes the figures of a strategy's run under a hang fault from its attempts
// (ev carries the stop and the SIGCONT) and judges them (judgeRedisHang, judgeDBHang).
func hangFigures(ev *ChaosEvent, cfg Config, takesLock bool, start time.Time, purchases []*purchase, instances, oversold int, byItem bool) *HangFigures {
	h := ev.Hang
	as := hangAttempts(purchases, instances, byItem)
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	stopped, cont := sec(h.StoppedAt), sec(h.ContinuedAt)
	h.TakesLock, h.Oversold = takesLock, oversold
	h.ResumedS = firstAfter(as, start.Add(cont), func(r purchaseResult) bool { return r.Status == 201 })
	switch h.Target {
	case hangRedis:
		// Healthy: answered before the stop too (a purchase in flight at the stop waits on
		// the hung Redis: it is counted among the caught ones, not the healthy ones).
		h.Healthy = window(as, start, hangWarmUp, hangWarmUp+hangHealthy, stopped)
		h.Caught, h.CaughtMaxMS = caught(as, start.Add(stopped))
		// Answered before the SIGCONT too: a purchase sent just before it may be served by the
		// Redis that answers again, under a fresh lock, which is no sale of the hang.
		h.Hung = window(as, start, stopped+hangSettle, cont, cont)
		if takesLock {
			h.HeldOver, h.NewLocks = heldOver(as, start.Add(stopped), start.Add(stopped+hangSettle), start.Add(cont))
		}
		h.LockedBackS = -1
		if takesLock {
			h.LockedBackS = firstAfter(as, start.Add(cont), func(r purchaseResult) bool { return r.Status == 201 && !r.Receipt.Degraded })
		}
		h.Misses = judgeRedisHang(h)
	case hangPostgres:
		h.Hung = window(as, start, stopped, cont, 0)
		h.Caught, h.CaughtMaxMS = caught(as, start.Add(stopped))
		h.MaxPurchases = cfg.MaxPurchases
		// From hangSettle after the stop: a purchase answered just before it may still be on
		// its way back to the client, its place already free.
		from, to := start.Add(stopped+hangSettle), start.Add(cont)
		h.MostAdmitted, h.AdmittedBy = mostAdmitted(as, from, to), "client"
		if len(h.logs) > 0 {
			if n, err := serverAdmitted(h.logs, from, to); err == nil {
				h.MostAdmitted, h.AdmittedBy = n, "server"
			}
		}
		h.Misses = judgeDBHang(h)
	}
	return h
}

// judgeRedisHang returns the targets h misses. Under guard: from hangSettle after the stop the
// storefronts sell at least half their healthy req/s, with a p99 within max(3x healthy,
// 250ms), no 5xx, every sale degraded (a strategy that takes a lock); under fail every answer
// of that window is a 503 within a second (a strategy that takes a lock; one that does not
// is held to the guard's targets). Both: locked sales back within 5s of the SIGCONT, nothing
// oversold.
func judgeRedisHang(h *HangFigures) []string {
	var miss []string
	missf := func(format string, a ...any) { miss = append(miss, fmt.Sprintf(format, a...)) }
	hung, healthy := h.Hung, h.Healthy
	if hung.Sent == 0 {
		missf("no purchase was sent in the hung window")
	}
	if h.Policy == "fail" && h.TakesLock {
		if hung.Non503 > 0 {
			missf("%d answer(s) of the hung window were not 503 (%v)", hung.Non503, hung.Codes)
		}
		if hung.Slowest503 > ms(hangFailWithin) {
			missf("slowest 503 of the hung window %.0fms > %s", hung.Slowest503, hangFailWithin)
		}
	} else {
		if hung.ReqPerSec < 0.5*healthy.ReqPerSec {
			missf("hung req/s %.0f < 0.5x healthy %.0f", hung.ReqPerSec, healthy.ReqPerSec)
		}
		if bound := max(3*healthy.P99MS, 250); hung.P99MS > bound {
			missf("hung p99 %.0fms > max(3x healthy p99 %.0fms, 250ms)", hung.P99MS, healthy.P99MS)
		}
		if hung.S5xx > 0 {
			missf("%d 5xx answer(s) in the hung window (%v)", hung.S5xx, hung.Codes)
		}
		if h.TakesLock && hung.Degraded < hung.Sold {
			missf("%d of %d sales of the hung window not degraded (%d under a lock taken before the stop)", hung.Sold-hung.Degraded, hung.Sold, h.HeldOver)
		}
		if hung.Sold == 0 && hung.Sent > 0 {
			missf("no sale in the hung window")
		}
	}
	if h.TakesLock && (h.LockedBackS < 0 || h.LockedBackS > hangBackWithin.Seconds()) {
		missf("locked sales back %s after the SIGCONT (want within %s)", fmtSince(h.LockedBackS), hangBackWithin)
	}
	if h.Oversold > 0 {
		missf("%d unit(s) oversold", h.Oversold)
	}
	return miss
}

// judgeDBHang returns the targets h misses: while the database hangs, purchases past the bound
// are answered at_capacity with a p99 under a second, no instance admits more than its bound;
// selling resumes within 5s of the SIGCONT; nothing is oversold.
func judgeDBHang(h *HangFigures) []string {
	var miss []string
	missf := func(format string, a ...any) { miss = append(miss, fmt.Sprintf(format, a...)) }
	if h.Hung.AtCapacity == 0 {
		missf("no purchase answered at_capacity while the database hung (raise -concurrency above -max-purchases x instances)")
	}
	if h.Hung.ShedP99MS > ms(hangShedWithin) {
		missf("at_capacity p99 %.0fms > %s", h.Hung.ShedP99MS, hangShedWithin)
	}
	if h.MaxPurchases > 0 && h.MostAdmitted > h.MaxPurchases {
		missf("%d purchases admitted at one instance > --max-purchases %d", h.MostAdmitted, h.MaxPurchases)
	}
	if h.ResumedS < 0 || h.ResumedS > hangBackWithin.Seconds() {
		missf("selling resumed %s after the SIGCONT (want within %s)", fmtSince(h.ResumedS), hangBackWithin)
	}
	if h.Oversold > 0 {
		missf("%d unit(s) oversold", h.Oversold)
	}
	return miss
}

func fmtSince(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2fs", s)
}

// String describes the figures in a few lines, the verdict last.
func (h *HangFigures) String() string {
	var b strings.Builder
	switch h.Target {
	case hangRedis:
		fmt.Fprintf(&b, "redis-server stopped (SIGSTOP) at %.2fs, continued at %.2fs; --on-redis-down %s", h.StoppedAt, h.ContinuedAt, h.Policy)
		fmt.Fprintf(&b, "\n    healthy %s", h.Healthy.line())
		fmt.Fprintf(&b, "\n    hung    %s", h.Hung.line())
		if h.Healthy.ReqPerSec > 0 {
			fmt.Fprintf(&b, "\n    hung / healthy: req/s %.2fx, p99 %.2fx", h.Hung.ReqPerSec/h.Healthy.ReqPerSec, h.Hung.P99MS/max(h.Healthy.P99MS, 1e-3))
		}
		fmt.Fprintf(&b, "\n    %d purchase(s) in flight at the stop, answered at most %.0fms after being sent", h.Caught, h.CaughtMaxMS)
		if h.HeldOver+h.NewLocks > 0 {
			fmt.Fprintf(&b, "; hung-window sales under a lock: %d with a token issued before the stop (a hold still selling), %d with a later one", h.HeldOver, h.NewLocks)
		}
		if h.TakesLock {
			fmt.Fprintf(&b, "; locked sales back %s after the SIGCONT", fmtSince(h.LockedBackS))
		}
	case hangPostgres:
		fmt.Fprintf(&b, "postgres (postmaster and every backend) stopped (SIGSTOP) at %.2fs, continued at %.2fs", h.StoppedAt, h.ContinuedAt)
		fmt.Fprintf(&b, "\n    hung    %s", h.Hung.line())
		fmt.Fprintf(&b, "\n    %d answered 503 at_capacity (p99 %.1fms); most purchases in flight at one instance %d (--max-purchases %d, seen by the %s)",
			h.Hung.AtCapacity, h.Hung.ShedP99MS, h.MostAdmitted, h.MaxPurchases, h.AdmittedBy)
	}
	fmt.Fprintf(&b, "; selling resumed %s after the SIGCONT; oversold %d", fmtSince(h.ResumedS), h.Oversold)
	b.WriteString("\n    " + h.verdictLine())
	return b.String()
}

// verdictLine says whether the targets are met.
func (h *HangFigures) verdictLine() string {
	switch {
	case !h.Judged:
		return "verdict: not judged (the targets apply to the strategies that never oversell)"
	case len(h.Misses) == 0 && h.Target == hangRedis && h.Policy == "fail" && h.TakesLock:
		return fmt.Sprintf("verdict: MET (every answer of the hung window a 503 within %s, locked sales back within %s, 0 oversold)", hangFailWithin, hangBackWithin)
	case len(h.Misses) == 0 && h.Target == hangRedis && h.TakesLock:
		return "verdict: MET (>= 0.5x healthy req/s, p99 <= max(3x healthy, 250ms), no 5xx, every sale degraded, locked sales back within 5s, 0 oversold)"
	case len(h.Misses) == 0 && h.Target == hangRedis:
		return "verdict: MET (takes no lock: >= 0.5x healthy req/s, p99 <= max(3x healthy, 250ms), no 5xx, 0 oversold)"
	case len(h.Misses) == 0:
		return fmt.Sprintf("verdict: MET (at_capacity within %s, in-flight bound respected, selling back within %s, 0 oversold)", hangShedWithin, hangBackWithin)
	}
	return "verdict: MISSED: " + strings.Join(h.Misses, "; ")
}

func (w Window) line() string {
	s := fmt.Sprintf("[%.1fs, %.1fs): %d sent, %.0f req/s, p99 %.1fms, max %.1fms, %d sold (%d degraded), %d 5xx",
		w.FromS, w.ToS, w.Sent, w.ReqPerSec, w.P99MS, w.MaxMS, w.Sold, w.Degraded, w.S5xx)
	if len(w.Codes) > 0 {
		s += fmt.Sprintf(" %v", w.Codes)
	}
	return s
}

// The processes a hang stops.
const (
	hangRedis    = "redis"
	hangPostgres = "postgres"
)

// hangRedisServer stops the run's redis-server for -hang-for (after the healthy window).
func (c *chaos) hangRedisServer(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosRedisHang}
	if c.cluster.Redis == nil || c.cluster.Redis.PID == 0 {
		ev.Note = "-chaos redis-hang needs a redis-server child (redis-server on PATH), not miniredis"
		return ev
	}
	srv := c.cluster.Redis.srv
	return c.hang(ctx, stop, start, ev, hangRedis, func(sig syscall.Signal) error { return srv.Signal(sig) })
}

// hangPostgresServer stops the run's private PostgreSQL server for -hang-for.
func (c *chaos) hangPostgresServer(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosDBHang}
	if c.cluster.Postgres == nil {
		ev.Note = "-chaos db-hang needs -db postgres"
		return ev
	}
	pid := c.cluster.Postgres.PID()
	ev = c.hang(ctx, stop, start, ev, hangPostgres, func(sig syscall.Signal) error { return signalTree(pid, sig) })
	if ev.Hang != nil {
		for _, in := range c.cluster.Instances {
			ev.Hang.logs = append(ev.Hang.logs, filepath.Join(c.cluster.Dir, fmt.Sprintf("instance-%d.log", in.Index)))
		}
	}
	return ev
}

// hang waits for the end of the healthy window, stops the process with signal(SIGSTOP) for
// c.hangFor (less when ctx ends), then continues it. It never leaves the process stopped.
func (c *chaos) hang(ctx context.Context, stop <-chan struct{}, start time.Time, ev *ChaosEvent, target string, signal func(syscall.Signal) error) *ChaosEvent {
	if !c.wait(ctx, stop, time.Until(start.Add(hangWarmUp+hangHealthy+hangGap))) {
		ev.Note = "the run ended before the hang"
		return ev
	}
	if err := signal(syscall.SIGSTOP); err != nil {
		_ = signal(syscall.SIGCONT) // a partial stop (a backend gone meanwhile) is undone
		ev.Note = "SIGSTOP: " + err.Error()
		return ev
	}
	ev.Hang = &HangFigures{Target: target, Policy: c.onRedisDown}
	ev.Paused, ev.PausedAt = true, ev.mark(start, "%s stopped (SIGSTOP)", target)
	ev.FaultAt = ev.PausedAt
	ev.Hang.StoppedAt = ev.PausedAt
	t := time.NewTimer(c.hangFor)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	err := signal(syscall.SIGCONT)
	ev.ResumedAt = ev.mark(start, "%s continued (SIGCONT)", target)
	ev.Hang.ContinuedAt = ev.ResumedAt
	if err != nil {
		ev.Note = "SIGCONT: " + err.Error()
	}
	return ev
}

// signalTree sends sig to pid and to each of its children: a PostgreSQL backend runs in a
// session of its own, so the process group is not enough. SIGSTOP goes to the postmaster first
// (no backend is forked meanwhile), SIGCONT to it last.
func signalTree(pid int, sig syscall.Signal) error {
	if sig == syscall.SIGSTOP {
		if err := syscall.Kill(pid, sig); err != nil {
			return err
		}
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse after its closing paren.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			if err := syscall.Kill(child, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	if sig != syscall.SIGSTOP {
		errs = append(errs, syscall.Kill(pid, sig))
	}
	return errors.Join(errs...)
}

// judgeHang fills in the hang figures of res (a run under redis-hang or db-hang) and returns
// the targets missed by a strategy expected to meet them.
func judgeHang(cfg Config, res *StrategyResult, start time.Time, purchases []*purchase, takesLock bool) []string {
	ev := res.Chaos
	if ev == nil || ev.Hang == nil {
		if res.ExpectedSafe {
			note := "the hang was not brought"
			if ev != nil && ev.Note != "" {
				note += ": " + ev.Note
			}
			return []string{note}
		}
		return nil
	}
	byItem := res.Route == RouteItem
	hangFigures(ev, cfg, takesLock, start, purchases, res.Instances, res.OversoldUnits, byItem)
	ev.Hang.Judged = res.ExpectedSafe
	if !res.ExpectedSafe {
		return nil
	}
	out := make([]string, len(ev.Hang.Misses))
	for i, m := range ev.Hang.Misses {
		out[i] = ev.Mode + ": " + m
	}
	return out
}
