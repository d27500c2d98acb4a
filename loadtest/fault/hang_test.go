package fault

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hangSample builds the purchases of a synthetic hang run: one attempt every 10ms per
// instance (3 instances) from 0 to 10s; answer(at) decides each one.
func hangSample(start time.Time, answer func(at time.Duration, instance int) client.PurchaseResult) []*client.Purchase {
	var out []*client.Purchase
	for at := time.Duration(0); at < 10*time.Second; at += 10 * time.Millisecond {
		for in := 0; in < 3; in++ {
			r := answer(at, in)
			r.Start = start.Add(at)
			out = append(out, &client.Purchase{Instance: in, Attempts: []client.PurchaseResult{r}})
		}
	}
	return out
}

// redisHangEvent is a hang of Redis from 3s to 6.5s (answers slow down from 2.5s).
func redisHangEvent(policy string) *Event {
	return &Event{Mode: ChaosRedisHang, Hang: &HangFigures{Target: hangRedis, Policy: policy, StoppedAt: 3, ContinuedAt: 6.5}}
}

// A well-behaved run under guard: 20ms answers healthy, 60ms degraded sales while Redis hangs,
// locked again 100ms after the SIGCONT.
func guardAnswer(at time.Duration, _ int) client.PurchaseResult {
	switch {
	case at >= 2500*time.Millisecond && at < 6500*time.Millisecond:
		return client.PurchaseResult{Status: 201, Latency: 60 * time.Millisecond, Receipt: client.Receipt{Degraded: true}}
	case at >= 6500*time.Millisecond && at < 6600*time.Millisecond:
		return client.PurchaseResult{Status: 201, Latency: 5 * time.Millisecond, Receipt: client.Receipt{Degraded: true}}
	}
	return client.PurchaseResult{Status: 201, Latency: 20 * time.Millisecond}
}

// The figures of -chaos redis-hang and the verdict, from synthetic answers: each target
// missed is named, and only those.
func TestHangRedisVerdict(t *testing.T) {
	start := time.Now()
	figures := func(policy string, takesLock bool, oversold int, answer func(time.Duration, int) client.PurchaseResult) *HangFigures {
		ev := redisHangEvent(policy)
		return hangFigures(ev, config.Config{}, takesLock, start, hangSample(start, answer), 3, oversold, false)
	}
	h := figures("guard", true, 0, guardAnswer)
	assert.Equal(t, 600, h.Healthy.Sent, "[0.5s, 2.5s): 200 per instance")
	assert.InDelta(t, 300, h.Healthy.ReqPerSec, 0.01)
	assert.InDelta(t, 20, h.Healthy.P99MS, 0.01)
	assert.Equal(t, 582, h.Hung.Sent, "[4.5s, 6.5s) and answered before 6.5s: 200 per instance, less the 18 of the last 60ms")
	assert.Equal(t, 15, h.Caught, "sent from 2.95s to 2.99s, answered 60ms later")
	assert.InDelta(t, 60, h.CaughtMaxMS, 0.01)
	assert.InDelta(t, 60, h.Hung.P99MS, 0.01)
	assert.Equal(t, h.Hung.Sold, h.Hung.Degraded)
	assert.InDelta(t, 0.12, h.LockedBackS, 0.001, "the first 201 without degraded: sent at 6.6s, answered 20ms later")
	assert.Empty(t, h.Misses)
	assert.Contains(t, (&HangFigures{Target: hangRedis, Policy: "guard", TakesLock: true, Judged: true}).verdictLine(), "MET")

	// A purchase sent just before the SIGCONT and served after it by the Redis that answers
	// again, under a fresh lock, is no sale of the hang.
	late := figures("guard", true, 0, func(at time.Duration, in int) client.PurchaseResult {
		if at >= 6490*time.Millisecond && at < 6500*time.Millisecond {
			return client.PurchaseResult{Status: 201, Latency: 30 * time.Millisecond, Receipt: client.Receipt{FenceToken: 99}}
		}
		return guardAnswer(at, in)
	})
	assert.Zero(t, late.NewLocks)
	assert.Empty(t, late.Misses)

	slow := figures("guard", true, 0, func(at time.Duration, in int) client.PurchaseResult {
		r := guardAnswer(at, in)
		if at >= 2500*time.Millisecond && at < 6500*time.Millisecond && in == 0 {
			r.Latency = 300 * time.Millisecond // p99 300ms > max(3x 20ms, 250ms)
		}
		return r
	})
	require.Len(t, slow.Misses, 1, slow.Misses)
	assert.Contains(t, slow.Misses[0], "hung p99 300ms > max(3x healthy p99 20ms, 250ms)")

	broken := figures("guard", true, 2, func(at time.Duration, in int) client.PurchaseResult {
		switch {
		case at >= 4500*time.Millisecond && at < 4600*time.Millisecond && in == 1:
			return client.PurchaseResult{Status: 503, Code: "unavailable", Latency: time.Millisecond}
		case at >= 5*time.Second && at < 5010*time.Millisecond:
			return client.PurchaseResult{Status: 201, Latency: time.Millisecond, Receipt: client.Receipt{FenceToken: 99}} // not degraded, a lock taken meanwhile
		case at >= 6500*time.Millisecond:
			return client.PurchaseResult{Status: 201, Latency: 5 * time.Millisecond, Receipt: client.Receipt{Degraded: true}} // never locked again
		}
		return guardAnswer(at, in)
	})
	assert.Equal(t, 10, broken.Hung.S5xx)
	assert.Equal(t, -1.0, broken.LockedBackS)
	assert.Equal(t, 3, broken.NewLocks)
	assert.Zero(t, broken.HeldOver)
	assert.ElementsMatch(t, []string{
		"10 5xx answer(s) in the hung window (map[unavailable:10])",
		"3 of 572 sales of the hung window not degraded (0 under a lock taken before the stop)",
		"locked sales back never after the SIGCONT (want within 5s)",
		"2 unit(s) oversold",
	}, broken.Misses)
	broken.Judged = true
	assert.Contains(t, broken.verdictLine(), "MISSED: ")

	// A strategy that takes no lock sells nothing degraded and has no lock to take back.
	noLock := figures("guard", false, 0, func(at time.Duration, _ int) client.PurchaseResult {
		return client.PurchaseResult{Status: 201, Latency: 20 * time.Millisecond}
	})
	assert.Empty(t, noLock.Misses)

	// Below half the healthy rate.
	lowRate := &HangFigures{Target: hangRedis, Policy: "guard", TakesLock: true, LockedBackS: 0.1,
		Healthy: Window{Sent: 10, ReqPerSec: 300, P99MS: 20}, Hung: Window{Sent: 10, ReqPerSec: 149, P99MS: 20, Sold: 10, Degraded: 10}}
	assert.Equal(t, []string{"hung req/s 149 < 0.5x healthy 300"}, judgeRedisHang(lowRate))
	lowRate.Hung.ReqPerSec = 150
	assert.Empty(t, judgeRedisHang(lowRate))

	// Under fail: every answer of the hung window a 503 within a second.
	failAnswer := func(at time.Duration, in int) client.PurchaseResult {
		if at >= 2500*time.Millisecond && at < 6500*time.Millisecond {
			return client.PurchaseResult{Status: 503, Code: "unavailable", Latency: 250 * time.Millisecond}
		}
		return guardAnswer(at, in)
	}
	fail := figures("fail", true, 0, failAnswer)
	assert.Empty(t, fail.Misses)
	assert.InDelta(t, 250, fail.Hung.Slowest503, 0.01)
	fail = figures("fail", true, 0, func(at time.Duration, in int) client.PurchaseResult {
		r := failAnswer(at, in)
		if at >= 5*time.Second && at < 5100*time.Millisecond && in == 2 {
			r.Latency = 1200 * time.Millisecond
		}
		if at >= 6*time.Second && at < 6010*time.Millisecond {
			r = client.PurchaseResult{Status: 201, Latency: time.Millisecond, Receipt: client.Receipt{Degraded: true}}
		}
		return r
	})
	assert.ElementsMatch(t, []string{
		"3 answer(s) of the hung window were not 503 (map[unavailable:522])",
		"slowest 503 of the hung window 1200ms > 1s",
	}, fail.Misses)
}

// The figures of -chaos db-hang and the verdict: the at_capacity answers and their p99, the
// most purchases admitted at one instance against the bound, selling back after the SIGCONT.
func TestHangDBVerdict(t *testing.T) {
	start := time.Now()
	ev := func() *Event {
		return &Event{Mode: ChaosDBHang, Hang: &HangFigures{Target: hangPostgres, StoppedAt: 2.5, ContinuedAt: 6.5}}
	}
	// While the database hangs, instance i admits (and keeps waiting) the purchases sent in
	// its first admitted*10ms, and sheds the others in 2ms.
	answer := func(admitted int, shedIn time.Duration) func(time.Duration, int) client.PurchaseResult {
		return func(at time.Duration, in int) client.PurchaseResult {
			switch {
			case at >= 2500*time.Millisecond && at < 2500*time.Millisecond+time.Duration(admitted)*10*time.Millisecond:
				return client.PurchaseResult{Status: 201, Latency: 6500*time.Millisecond - at + 30*time.Millisecond}
			case at >= 2500*time.Millisecond && at < 6500*time.Millisecond:
				return client.PurchaseResult{Status: 503, Code: "at_capacity", Latency: shedIn}
			}
			return client.PurchaseResult{Status: 201, Latency: 20 * time.Millisecond}
		}
	}
	cfg := config.Config{MaxPurchases: 64}
	h := hangFigures(ev(), cfg, true, start, hangSample(start, answer(64, 2*time.Millisecond)), 3, 0, false)
	assert.Equal(t, 64, h.MostAdmitted)
	assert.Equal(t, 3*(400-64), h.Hung.AtCapacity)
	assert.InDelta(t, 2, h.Hung.ShedP99MS, 0.01)
	assert.InDelta(t, 0.02, h.ResumedS, 0.001, "the first purchase sent after the SIGCONT sold in 20ms")
	assert.Empty(t, h.Misses)

	h = hangFigures(ev(), cfg, true, start, hangSample(start, answer(65, 1500*time.Millisecond)), 3, 1, false)
	assert.Equal(t, 65, h.MostAdmitted)
	assert.ElementsMatch(t, []string{
		"at_capacity p99 1500ms > 1s",
		"65 purchases admitted at one instance > --max-purchases 64",
		"1 unit(s) oversold",
	}, h.Misses)

	h = hangFigures(ev(), cfg, true, start, hangSample(start, func(at time.Duration, in int) client.PurchaseResult {
		if at >= 2500*time.Millisecond {
			return client.PurchaseResult{Status: 503, Code: "unavailable", Latency: time.Second}
		}
		return client.PurchaseResult{Status: 201, Latency: 20 * time.Millisecond}
	}), 3, 0, false)
	assert.ElementsMatch(t, []string{
		"no purchase answered at_capacity while the database hung (raise -concurrency above -max-purchases x instances)",
		"100 purchases admitted at one instance > --max-purchases 64",
		"selling resumed never after the SIGCONT (want within 5s)",
	}, h.Misses)
}

// The purchases an instance served at once, read from its access log: at_capacity answers and
// other paths are left out, a request counts from its start (its line's time less its
// duration) to its answer.
func TestHangServerAdmitted(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := func(end time.Duration, d, path, code string) string {
		s := fmt.Sprintf("time=%s level=INFO msg=request request_id=ab method=POST path=%s status=201 duration=%s bytes=10 remote=127.0.0.1",
			base.Add(end).Format("2006-01-02T15:04:05.000Z07:00"), path, d)
		if code != "" {
			s += " code=" + code
		}
		return s
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	require.NoError(t, os.WriteFile(a, []byte(strings.Join([]string{
		"time=2026-01-02T03:04:05.000Z level=INFO msg=listening addr=127.0.0.1:1",
		line(5*time.Second, "4.5s", "/api/items/1/purchase", ""), // [0.5s, 5s)
		line(5*time.Second, "4.2s", "/api/items/2/purchase", ""), // [0.8s, 5s)
		line(3*time.Second, "2.5s", "/api/items/2/purchase", ""), // [0.5s, 3s)
		line(2*time.Second, "1.5ms", "/api/items/1/purchase", "at_capacity"),
		line(2*time.Second, "1.9s", "/api/items", ""),                     // not a purchase
		line(1100*time.Millisecond, "600ms", "/api/items/1/purchase", ""), // [0.5s, 1.1s): before the window
	}, "\n")), 0o600))
	require.NoError(t, os.WriteFile(b, []byte(line(4*time.Second, "2s", "/api/items/1/purchase", "")+"\n"), 0o600))
	n, err := serverAdmitted([]string{a, b}, base.Add(2*time.Second), base.Add(4*time.Second))
	require.NoError(t, err)
	assert.Equal(t, 3, n, "three purchases of instance a in flight from 2s to 3s")
	n, err = serverAdmitted([]string{a, b}, base.Add(3500*time.Millisecond), base.Add(4*time.Second))
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	_, err = serverAdmitted([]string{filepath.Join(dir, "missing.log")}, base, base.Add(time.Second))
	assert.Error(t, err)
}
