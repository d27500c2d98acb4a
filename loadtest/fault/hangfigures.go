package fault

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
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
	r        client.PurchaseResult
	instance int
}

// hangAttempts lists every attempt of purchases, with its instance (attempt k of a purchase
// went to instance (Instance+k) mod n round-robin, to Instance routed by item).
func hangAttempts(purchases []*client.Purchase, instances int, byItem bool) []hangAttempt {
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
func firstAfter(as []hangAttempt, t time.Time, ok func(client.PurchaseResult) bool) float64 {
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
			as = append(as, hangAttempt{r: client.PurchaseResult{Start: end.Add(-d).Truncate(time.Millisecond).Add(time.Millisecond),
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
func hangFigures(ev *Event, cfg config.Config, takesLock bool, start time.Time, purchases []*client.Purchase, instances, oversold int, byItem bool) *HangFigures {
	h := ev.Hang
	as := hangAttempts(purchases, instances, byItem)
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	stopped, cont := sec(h.StoppedAt), sec(h.ContinuedAt)
	h.TakesLock, h.Oversold = takesLock, oversold
	h.ResumedS = firstAfter(as, start.Add(cont), func(r client.PurchaseResult) bool { return r.Status == 201 })
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
			h.LockedBackS = firstAfter(as, start.Add(cont), func(r client.PurchaseResult) bool { return r.Status == 201 && !r.Receipt.Degraded })
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

func (w Window) line() string {
	s := fmt.Sprintf("[%.1fs, %.1fs): %d sent, %.0f req/s, p99 %.1fms, max %.1fms, %d sold (%d degraded), %d 5xx",
		w.FromS, w.ToS, w.Sent, w.ReqPerSec, w.P99MS, w.MaxMS, w.Sold, w.Degraded, w.S5xx)
	if len(w.Codes) > 0 {
		s += fmt.Sprintf(" %v", w.Codes)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
