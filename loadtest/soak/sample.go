package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
)

// A Metric is one quantity the soak samples and judges.
type Metric struct {
	Name   string // as reported: "goroutines", "redis_keys", ...
	Source string // the Prometheus metric it is read from, or "redis"
	Unit   string // "", "bytes"
	// Bound is the growth over the judged window that makes a LEAK: an absolute floor, raised
	// to Rel × the series' median when that is larger (a heap of 200 MiB may move by more than
	// one of 20 MiB without leaking).
	Bound float64
	Rel   float64
	Why   string // why the bound is what it is (the report prints it)
}

// Storefront metrics, read from each instance's /metrics.
var (
	Goroutines = Metric{Name: "goroutines", Source: "go_goroutines", Bound: 48, Rel: 0.25,
		Why: "more than the load test's 32 clients can hold in flight at once, plus the run's 3 instances' streams"}
	HeapInuse = Metric{Name: "heap_inuse", Source: "go_memstats_heap_inuse_bytes", Unit: "bytes", Bound: 32 << 20, Rel: 0.5,
		Why: "a garbage-collected heap breathes by up to its GOGC target (100%: the live heap again) between cycles"}
	RSS = Metric{Name: "rss", Source: "process_resident_memory_bytes", Unit: "bytes", Bound: 64 << 20, Rel: 0.5,
		Why: "the heap's bound plus what the runtime keeps and gives back lazily (scavenger)"}
	OpenFDs = Metric{Name: "open_fds", Source: "process_open_fds", Bound: 48, Rel: 0.25,
		Why: "one socket a client connection (32 clients) plus the Redis and database pools' churn"}
	DBInUse = Metric{Name: "db_in_use", Source: "go_sql_in_use_connections", Bound: 8, Rel: 0,
		Why: "connections in use return to the pool when a request ends: a trend is a transaction never ended"}
	HoldsOverdue = Metric{Name: "holds_overdue", Source: "stockguard_holds_overdue", Bound: 64, Rel: 0.25,
		Why: "active holds past their expiry are ended by the sweeper every few seconds: a trend is holds nothing ends"}
)

// Redis metrics, read from the run's shared Redis.
var (
	RedisClients = Metric{Name: "redis_clients", Source: "redis", Bound: 24, Rel: 0.25,
		Why: "each instance keeps a bounded pool plus a pub/sub connection; a trend is connections never closed"}
	RedisKeys = Metric{Name: "redis_keys", Source: "redis", Bound: 128, Rel: 0.25,
		Why: "locks, fences and admission slots are a few keys an item; a trend is keys nothing expires"}
	RedisChannels = Metric{Name: "redis_channels", Source: "redis", Bound: 16, Rel: 0.25,
		Why: "waiters subscribe to a lock's channel while they wait; a trend is subscriptions never dropped"}
)

// StorefrontMetrics are the metrics read from every storefront's /metrics, in report order.
var StorefrontMetrics = []Metric{Goroutines, HeapInuse, RSS, OpenFDs, DBInUse, HoldsOverdue}

// RedisMetrics are the metrics read from the shared Redis, in report order.
var RedisMetrics = []Metric{RedisClients, RedisKeys, RedisChannels}

// Sample is what one probe read at one instant: the value of each metric it found.
type Sample struct {
	At     time.Time
	Series string             // the series the values belong to ("i0@1712345678" or "redis")
	Values map[string]float64 // by Metric.Name
}

// ScrapeStorefront reads the storefront's /metrics at base and answers its sample. The series
// is named after the instance and its process's start time, so that a restarted instance starts
// a series of its own. A metric the storefront does not export is left out of the sample.
func ScrapeStorefront(ctx context.Context, hc *http.Client, name, base string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return Sample{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Sample{}, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	return parseMetrics(time.Now(), name, io.LimitReader(resp.Body, 8<<20))
}

// parseMetrics reads a Prometheus text exposition into a sample: each metric the summed value
// of its series (go_sql_in_use_connections has one series a database handle).
func parseMetrics(at time.Time, name string, r io.Reader) (Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, fmt.Errorf("%s /metrics: %w", name, err)
	}
	s := Sample{At: at, Series: name, Values: map[string]float64{}}
	if f, ok := fams["process_start_time_seconds"]; ok && len(f.Metric) > 0 {
		s.Series = name + "@" + strconv.FormatInt(int64(value(f.Metric[0])), 10)
	}
	for _, m := range StorefrontMetrics {
		f, ok := fams[m.Source]
		if !ok {
			continue
		}
		var sum float64
		for _, x := range f.Metric {
			sum += value(x)
		}
		s.Values[m.Name] = sum
	}
	return s, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// ScrapeRedis reads the shared Redis's connected clients, and its keys and pub/sub channels
// whose names start with prefix (SCAN and PUBSUB CHANNELS: neither blocks the server).
func ScrapeRedis(ctx context.Context, rdb redis.UniversalClient, prefix string) (Sample, error) {
	s := Sample{At: time.Now(), Series: "redis", Values: map[string]float64{}}
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return s, fmt.Errorf("redis INFO clients: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return s, fmt.Errorf("redis INFO clients: connected_clients %q: %w", v, err)
			}
			s.Values[RedisClients.Name] = n
		}
	}
	var keys float64
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys++
	}
	if err := iter.Err(); err != nil {
		return s, fmt.Errorf("redis SCAN %s*: %w", prefix, err)
	}
	s.Values[RedisKeys.Name] = keys
	chans, err := rdb.PubSubChannels(ctx, prefix+"*").Result()
	if err != nil {
		return s, fmt.Errorf("redis PUBSUB CHANNELS %s*: %w", prefix, err)
	}
	s.Values[RedisChannels.Name] = float64(len(chans))
	return s, nil
}
