package fault

import (
	"fmt"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
)

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

// judgeHang fills in the hang figures of res (a run under redis-hang or db-hang) and returns
// the targets missed by a strategy expected to meet them.
func judgeHang(cfg config.Config, res *Outcome, start time.Time, purchases []*client.Purchase, takesLock bool) []string {
	ev := res.Event
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
	byItem := res.Route == config.RouteItem
	hangFigures(ev, cfg, takesLock, start, purchases, res.Instances, res.Oversold, byItem)
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
