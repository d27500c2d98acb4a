package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/report"
)

// The same-run performance command (-perf): one storefront and a real redis-server, an SQLite
// file; in rounds it alternates /healthz, guard, lock+guard and lock+guard with --max-batch 1,
// each for -duration with -concurrency closed-loop clients and no simulated work, on one hot
// item, then on 10 items. Every purchase phase starts from a fresh catalogue with a stock that
// cannot run out, so every answer is a sale (a sold-out answer would be cheap and flatter the
// figures): req/s counts answers, and the table shows how many were not 201. --max-batch is a
// flag of the server, so the run starts a second storefront with --max-batch 1 on the same
// database and Redis; only one of the two is ever under load.

// perfStock is the stock of every item of a purchase phase: more than any phase can sell.
const perfStock = 1_000_000_000

// Perf targets, in the order of a round.
const (
	perfHealthz     = "/healthz"
	perfGuard       = "guard"
	perfLockGuard   = "lock+guard"
	perfLockGuardB1 = "lock+guard max-batch 1"
)

var perfTargets = []string{perfHealthz, perfGuard, perfLockGuard, perfLockGuardB1}

// perfScenarios are the item counts of the run: one hot item, then 10 items.
var perfScenarios = []int{1, 10}

// perfAcc accumulates one row over the rounds.
type perfAcc struct {
	hist     *hdrhistogram.Histogram
	requests int64
	seconds  float64
	not2xx   map[string]int
	holds    float64
	orders   float64
	cpu      time.Duration // the storefront's CPU time during the phases
}

// RunPerf runs the performance command described by cfg (Bin, Duration, Concurrency, Rounds,
// DB) and returns its report. Progress lines go to logw (nil: none).
func RunPerf(ctx context.Context, cfg config.Config, logw io.Writer) (*report.PerfReport, error) {
	logf := func(format string, a ...any) {
		if logw != nil && !cfg.Quiet {
			fmt.Fprintf(logw, format+"\n", a...)
		}
	}
	cl, err := cluster.Start(ctx, cluster.Config{Bin: cfg.Bin, Instances: 2, DB: cfg.DB, Log: logw,
		InstanceArgs: [][]string{nil, {"--max-batch", "1"}}})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if cl.Redis.Kind != "redis-server" {
		return nil, errors.New("-perf needs a real redis-server on PATH (apt-get install redis-server)")
	}
	hc := client.NewHTTPClient(cfg.Concurrency, cfg.Timeout)
	defer hc.CloseIdleConnections()
	front := &client.API{Base: cl.Instances[0].URL, Token: cl.AdminToken, HC: hc}
	batch1 := &client.API{Base: cl.Instances[1].URL, Token: cl.AdminToken, HC: hc}

	rep := &report.PerfReport{StartedAt: time.Now().UTC(), Redis: cl.Redis.Kind, DB: cl.DB, Clients: cfg.Concurrency,
		PhaseS: cfg.Duration.Seconds(), Rounds: cfg.Rounds,
		Machine: report.Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}}
	for _, items := range perfScenarios {
		accs := map[string]*perfAcc{}
		for _, t := range perfTargets {
			accs[t] = &perfAcc{hist: hdrhistogram.New(1, 60_000_000, 3), not2xx: map[string]int{}}
		}
		for round := 0; round <= cfg.Rounds; round++ { // round 0 warms up and is not counted
			for _, target := range perfTargets {
				a := front
				if target == perfLockGuardB1 {
					a = batch1
				}
				d := cfg.Duration
				if round == 0 {
					d = min(d, time.Second)
				}
				acc := accs[target]
				if round == 0 {
					acc = &perfAcc{hist: hdrhistogram.New(1, 60_000_000, 3), not2xx: map[string]int{}}
				}
				pid := cl.Instances[0].PID()
				if target == perfLockGuardB1 {
					pid = cl.Instances[1].PID()
				}
				n, took, err := perfPhase(ctx, a, pid, target, items, cfg.Concurrency, d, acc)
				if err != nil {
					return nil, fmt.Errorf("%s on %d item(s): %w", target, items, err)
				}
				if round > 0 {
					rep.Phases = append(rep.Phases, report.PerfPhaseLog{Round: round, Items: items, Target: target,
						Requests: n, ReqPerSec: float64(n) / took.Seconds()})
					logf("round %d, %d item(s), %-24s %8.0f req/s", round, items, target, float64(n)/took.Seconds())
				}
			}
		}
		for _, t := range perfTargets {
			acc := accs[t]
			row := report.PerfRow{Items: items, Target: t, Requests: acc.requests, ReqPerSec: float64(acc.requests) / acc.seconds,
				P50MS: float64(acc.hist.ValueAtQuantile(50)) / 1000, P99MS: float64(acc.hist.ValueAtQuantile(99)) / 1000}
			if len(acc.not2xx) > 0 {
				row.Not2xx = acc.not2xx
			}
			if acc.holds > 0 {
				row.MeanBatch = acc.orders / acc.holds
			}
			if acc.cpu > 0 && acc.requests > 0 {
				row.CPUPerReq = float64(acc.cpu.Microseconds()) / float64(acc.requests)
			}
			rep.Rows = append(rep.Rows, row)
		}
		rate := func(t string) float64 { return float64(accs[t].requests) / accs[t].seconds }
		add := func(name string, v, target float64) {
			rep.Ratios = append(rep.Ratios, report.PerfRatio{Items: items, Name: name, Value: v, Target: target})
		}
		lgTarget, hzTarget := 1.0, 0.0
		if items == 1 {
			lgTarget, hzTarget = 1.5, 0.4
		}
		add("lock+guard / guard", rate(perfLockGuard)/rate(perfGuard), lgTarget)
		add("lock+guard / /healthz", rate(perfLockGuard)/rate(perfHealthz), hzTarget)
		add("guard / /healthz", rate(perfGuard)/rate(perfHealthz), 0)
		add("lock+guard max-batch 1 / guard", rate(perfLockGuardB1)/rate(perfGuard), 0)
	}
	return rep, nil
}

// perfPhase runs one target for d with clients closed-loop clients, adding its answers to acc.
// It returns the answers counted and the phase's length.
func perfPhase(ctx context.Context, a *client.API, pid int, target string, items, clients int, d time.Duration, acc *perfAcc) (int64, time.Duration, error) {
	var ids []int64
	purchase := target != perfHealthz
	if purchase {
		var err error
		if ids, err = perfReset(ctx, a, items); err != nil {
			return 0, 0, err
		}
	}
	holds0, orders0, _ := perfBatchMetrics(ctx, a)
	strategy := target
	if target == perfLockGuardB1 {
		strategy = perfLockGuard
	}
	cpu0, cpuOK := procCPU(pid)
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type clientOut struct {
		hist   *hdrhistogram.Histogram
		n      int64
		not2xx map[string]int
	}
	outs := make([]clientOut, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() { // owner: perfPhase, which waits for it; ends with pctx
			defer wg.Done()
			o := clientOut{hist: hdrhistogram.New(1, 60_000_000, 3), not2xx: map[string]int{}}
			for i := 0; pctx.Err() == nil; i++ {
				t0 := time.Now()
				var status int
				var err error
				if purchase {
					r := a.Purchase(pctx, client.PurchaseReq{ItemID: ids[(c+i)%len(ids)], Quantity: 1, Strategy: strategy,
						Key: fmt.Sprintf("perf-%d-%d-%d", start.UnixNano(), c, i)})
					status, err = r.Status, r.Err
					if r.Code != "" {
						err = errors.New(r.Code)
					}
				} else {
					status, err = a.Do(pctx, http.MethodGet, "/healthz", nil, nil, nil)
				}
				if pctx.Err() != nil { // cut by the end of the phase: not an answer
					break
				}
				_ = o.hist.RecordValue(max(1, time.Since(t0).Microseconds()))
				o.n++
				switch {
				case err != nil && status == 0:
					o.not2xx["error"]++
				case err != nil:
					o.not2xx[strconv.Itoa(status)+" "+err.Error()]++
				case status != http.StatusOK && status != http.StatusCreated:
					o.not2xx[strconv.Itoa(status)]++
				}
			}
			outs[c] = o
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if cpu1, ok := procCPU(pid); ok && cpuOK {
		acc.cpu += cpu1 - cpu0
	}
	var n int64
	for _, o := range outs {
		n += o.n
		acc.hist.Merge(o.hist)
		for k, v := range o.not2xx {
			acc.not2xx[k] += v
		}
	}
	acc.requests += n
	acc.seconds += took.Seconds()
	if holds1, orders1, ok := perfBatchMetrics(ctx, a); ok && target == perfLockGuard {
		acc.holds += holds1 - holds0
		acc.orders += orders1 - orders0
	}
	return n, took, nil
}

// procCPU returns the CPU time (user + system) process pid has used, from /proc (Linux; clock
// ticks of 10 ms); ok is false elsewhere.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command name (which is in parentheses and may hold spaces).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of proc(5)
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ: 100 on Linux
	return time.Duration(utime+stime) * tick, true
}

// perfReset replaces the catalogue with items items of a stock no phase can sell out, and
// returns their ids.
func perfReset(ctx context.Context, a *client.API, items int) ([]int64, error) {
	cat := make([]client.NewItem, items)
	for i := range cat {
		cat[i] = client.NewItem{SKU: fmt.Sprintf("PERF-%03d", i), Name: fmt.Sprintf("perf item %d", i), Stock: perfStock, PriceCents: 100}
	}
	if err := a.Reset(ctx, cat); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	list, err := a.Items(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(list))
	for i, it := range list {
		ids[i] = it.ID
	}
	if len(ids) != items {
		return nil, fmt.Errorf("reset: %d items listed, %d asked", len(ids), items)
	}
	return ids, nil
}

// perfBatchMetrics reads the coalesced holds and the orders they wrote from /metrics
// (stockguard_batch_size_count and _sum); ok is false when they cannot be read.
func perfBatchMetrics(ctx context.Context, a *client.API) (holds, orders float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.Base+"/metrics", nil)
	if err != nil {
		return 0, 0, false
	}
	resp, err := a.HC.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, false
	}
	found := 0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, cut := strings.Cut(sc.Text(), " ")
		if !cut {
			continue
		}
		switch name {
		case "stockguard_batch_size_count":
			holds, _ = strconv.ParseFloat(val, 64)
			found++
		case "stockguard_batch_size_sum":
			orders, _ = strconv.ParseFloat(val, 64)
			found++
		}
	}
	return holds, orders, found == 2
}
