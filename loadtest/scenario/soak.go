package scenario

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/soak"
)

// redisPrefix is the prefix of every Redis key and channel of the storefronts (inventory's
// LockKeyPrefix, InflightKeyPrefix, StockKeyPrefix ... all start with it).
const redisPrefix = "stockguard:"

// soakRun samples the cluster's storefronts and Redis over the whole run (-soak). It owns the
// sampling goroutine: stop ends it and waits for it.
type soakRun struct {
	rec    *soak.Recorder
	cancel context.CancelFunc
	done   chan struct{}
	close  func() error // the Redis client's
}

// startSoak starts sampling cl every cfg.SoakEvery. A storefront is named after its index
// and, once the fault schedule has restarted it, its generation ("i1", then "i1r1"): the
// sampler goes by process ids, so that a restart within the second of the last one (the
// series key's process start time is in whole seconds) still starts a series of its own.
func startSoak(ctx context.Context, cfg config.Config, cl *cluster.Cluster) *soakRun {
	gens := make([]map[int]int, len(cl.Instances)) // index -> pid -> generation; read by the sampler alone
	for i := range gens {
		gens[i] = map[int]int{}
	}
	targets := func() map[string]string {
		out := make(map[string]string, len(gens))
		for i := range gens {
			in := cl.Instance(i)
			g, seen := gens[i][in.PID()]
			if !seen {
				g = len(gens[i])
				gens[i][in.PID()] = g
			}
			name := fmt.Sprintf("i%d", i)
			if g > 0 {
				name += fmt.Sprintf("r%d", g)
			}
			out[name] = in.URL
		}
		return out
	}
	rdb := cl.Redis.Client()
	rec := soak.NewRecorder(soak.Config{Every: cfg.SoakEvery, Warmup: cfg.SoakWarmup, Target: targets,
		Redis: rdb, Prefix: redisPrefix, Log: slog.New(slog.DiscardHandler)})
	sctx, cancel := context.WithCancel(ctx)
	s := &soakRun{rec: rec, cancel: cancel, done: make(chan struct{}), close: rdb.Close}
	go func() { // owner: the soakRun; stop ends it
		defer close(s.done)
		rec.Run(sctx)
	}()
	return s
}

// stop ends the sampling, waits for its last probe, and judges every series.
func (s *soakRun) stop() *soak.Result {
	s.cancel()
	<-s.done
	_ = s.close()
	return s.rec.Result()
}

// judgeSoak puts the soak's result in the report and names the series judged LEAK (RunTargets
// then exits ExitLeak unless an invariant broke: exit 1 says more).
func judgeSoak(rep *report.Report, res *soak.Result, logw io.Writer) {
	rep.Soak = res
	for _, f := range res.Leaks() {
		rep.Leaked = append(rep.Leaked, f.Metric+" of "+f.Series)
	}
	if len(rep.Leaked) > 0 {
		logf(logw, "soak: LEAK: %s", strings.Join(rep.Leaked, ", "))
	}
}
