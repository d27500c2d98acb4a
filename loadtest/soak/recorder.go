package soak

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config says what a Recorder samples, and how often.
type Config struct {
	Every  time.Duration            // between two samples (default 2s)
	Warmup time.Duration            // left out of the fit (default 20s)
	Target func() map[string]string // the storefronts to sample now: name -> base URL
	Redis  redis.UniversalClient    // the shared Redis (nil: no Redis series)
	Prefix string                   // the storefronts' Redis key prefix ("stockguard:")
	Client *http.Client             // for /metrics (default: a client with a 2s timeout)
	Log    *slog.Logger             // scrape failures (a paused instance does not answer), at debug
}

// Recorder samples the storefronts and Redis every Config.Every until its context ends. A probe
// that fails (an instance paused or killed by a fault, Redis restarting) leaves a gap in its
// series; it is counted, not fatal.
type Recorder struct {
	cfg   Config
	start time.Time

	mu     sync.Mutex
	phase  string                        // SetPhase: appended to every series name
	series map[string]map[string][]Point // metric -> series -> points
	order  []string                      // series names, first seen first
	misses int
	probes int
}

// NewRecorder returns a Recorder; Run starts it.
func NewRecorder(cfg Config) *Recorder {
	if cfg.Every <= 0 {
		cfg.Every = 2 * time.Second
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = 20 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 2 * time.Second}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{cfg: cfg, series: map[string]map[string][]Point{}}
}

// Run samples until ctx ends. It returns when its last probe has.
func (r *Recorder) Run(ctx context.Context) {
	r.mu.Lock()
	r.start = time.Now()
	r.mu.Unlock()
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		r.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe takes one sample of every target and Redis, concurrently, each bounded by Every.
func (r *Recorder) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Every)
	defer cancel()
	var wg sync.WaitGroup
	targets := r.cfg.Target()
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		wg.Go(func() {
			s, err := ScrapeStorefront(ctx, r.cfg.Client, name, targets[name])
			r.add(s, err, name)
		})
	}
	if r.cfg.Redis != nil {
		wg.Go(func() {
			s, err := ScrapeRedis(ctx, r.cfg.Redis, r.cfg.Prefix)
			r.add(s, err, "redis")
		})
	}
	wg.Wait()
}

// SetPhase starts a phase of the soak: from the next sample on, every series (a storefront's,
// the Redis's) is a new one named with the phase ("redis [lock+guard]"). A run whose load
// changes by design (a strategy without a lock keeps a few Redis connections, one with a lock
// a pool of them) gives each load its own series, so that the change is not read as a trend;
// a leak grows within each phase. "" names no phase.
func (r *Recorder) SetPhase(phase string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = phase
}

func (r *Recorder) add(s Sample, err error, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != "" {
		s.Series += " [" + r.phase + "]"
	}
	r.probes++
	if err != nil {
		r.misses++
		r.cfg.Log.Debug("soak probe failed", "target", what, "err", err)
		return
	}
	at := s.At.Sub(r.start).Seconds()
	for name, v := range s.Values {
		if r.series[name] == nil {
			r.series[name] = map[string][]Point{}
		}
		if _, seen := r.series[name][s.Series]; !seen && !slices.Contains(r.order, s.Series) {
			r.order = append(r.order, s.Series)
		}
		r.series[name][s.Series] = append(r.series[name][s.Series], Point{At: at, Value: v})
	}
}

// Result is what a soak sampled and how each series was judged.
type Result struct {
	Every    float64                       `json:"every_s"`
	Warmup   float64                       `json:"warmup_s"`
	Probes   int                           `json:"probes"`
	Misses   int                           `json:"misses"` // probes that got no answer (a paused or restarting target)
	Fits     []Fit                         `json:"fits"`   // every series of every metric, in report order
	Series   map[string]map[string][]Point `json:"series"` // metric -> series -> points, for the plots
	Bounds   map[string]string             `json:"bounds"` // metric -> why its bound is what it is
	Metrics  []Metric                      `json:"-"`
	Observed []string                      `json:"observed"` // series names, first seen first
}

// Judged reports whether any series was long enough to be judged.
func (res *Result) Judged() bool {
	return res != nil && slices.ContainsFunc(res.Fits, func(f Fit) bool { return f.Short == "" })
}

// Leaks are the fits that found a leak.
func (res *Result) Leaks() []Fit {
	var out []Fit
	for _, f := range res.Fits {
		if f.Leak {
			out = append(out, f)
		}
	}
	return out
}

// Result judges every series sampled so far.
func (r *Recorder) Result() *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{Every: r.cfg.Every.Seconds(), Warmup: r.cfg.Warmup.Seconds(), Probes: r.probes, Misses: r.misses,
		Series: map[string]map[string][]Point{}, Bounds: map[string]string{}, Observed: slices.Clone(r.order)}
	for _, m := range append(slices.Clone(StorefrontMetrics), RedisMetrics...) {
		byName := r.series[m.Name]
		if len(byName) == 0 {
			continue
		}
		res.Metrics = append(res.Metrics, m)
		res.Bounds[m.Name] = m.Why
		res.Series[m.Name] = map[string][]Point{}
		for _, s := range r.order {
			pts, ok := byName[s]
			if !ok {
				continue
			}
			res.Series[m.Name][s] = slices.Clone(pts)
			res.Fits = append(res.Fits, Judge(m, s, pts, r.cfg.Warmup))
		}
	}
	return res
}
