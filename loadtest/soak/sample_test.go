package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/internal/redistest"
)

// metricsServer serves this test process's own Go and process metrics, as a storefront does.
func metricsServer(t *testing.T) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv
}

func TestParseMetricsSumsSeriesAndNamesTheProcess(t *testing.T) {
	text := strings.Join([]string{
		"# TYPE go_goroutines gauge", "go_goroutines 42",
		"# TYPE go_sql_in_use_connections gauge",
		`go_sql_in_use_connections{db_name="a"} 2`, `go_sql_in_use_connections{db_name="b"} 3`,
		"# TYPE process_start_time_seconds gauge", "process_start_time_seconds 1.7e+09", "",
	}, "\n")
	s, err := parseMetrics(time.Now(), "i0", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if s.Series != "i0@1700000000" || s.Values["goroutines"] != 42 || s.Values["db_in_use"] != 5 {
		t.Fatalf("sample %+v", s)
	}
	if _, ok := s.Values["rss"]; ok {
		t.Fatal("a metric the text does not have was sampled")
	}
	if _, err := parseMetrics(time.Now(), "i0", strings.NewReader("go_goroutines {{{\n")); err == nil {
		t.Fatal("malformed exposition accepted")
	}
}

func TestScrapeRedisCountsClientsKeysAndChannels(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for i := range 5 {
		rdb.Set(ctx, fmt.Sprintf("stockguard:lock:item:%d", i), "x", time.Minute)
	}
	rdb.Set(ctx, "other:key", "x", time.Minute)
	sub := rdb.Subscribe(ctx, "stockguard:lock:item:1", "other:chan")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := ScrapeRedis(ctx, rdb, "stockguard:")
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["redis_keys"] != 5 || s.Values["redis_channels"] != 1 || s.Values["redis_clients"] < 2 {
		t.Fatalf("redis sample %+v", s.Values)
	}
}

// probeEvery is the tests' sampling interval, which bounds each probe too: long enough for an
// in-process /metrics to answer on a loaded machine.
const probeEvery = 50 * time.Millisecond

// TestRecorderCatchesARealGoroutineLeak samples this very process while it leaks goroutines,
// then while it does not: the first soak is a LEAK, the second is not.
func TestRecorderCatchesARealGoroutineLeak(t *testing.T) {
	srv := metricsServer(t)
	soak := func(leakPerProbe int) *Result {
		stop := make(chan struct{})
		defer close(stop)
		// A probe is bounded by Every: at 10 ms, under stress-ng 914 of 918 probes missed.
		rec := NewRecorder(Config{Every: probeEvery, Warmup: time.Nanosecond,
			Target: func() map[string]string { return map[string]string{"i0": srv.URL} }})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); rec.Run(ctx) }()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			if len(rec.Result().Series["goroutines"]["i0@"+startTime(t, srv.URL)]) >= 40 {
				break
			}
			for range leakPerProbe {
				go func() { <-stop }() // kept until the soak ends
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
		return rec.Result()
	}
	if res := soak(8); len(res.Leaks()) == 0 {
		t.Fatalf("a leak of goroutines was not caught:\n%s", strings.Join(res.Lines(), "\n"))
	}
	res := soak(0)
	for _, f := range res.Leaks() {
		if f.Metric == "goroutines" {
			t.Fatalf("no leak, but:\n%s", strings.Join(res.Lines(), "\n"))
		}
	}
	var svg strings.Builder
	if err := res.WriteSVG(&svg, "goroutines"); err != nil || !strings.Contains(svg.String(), "i0@") {
		t.Fatalf("plot %q, %v", svg.String(), err)
	}
}

func startTime(t *testing.T, url string) string {
	t.Helper()
	s, err := ScrapeStorefront(context.Background(), http.DefaultClient, "i0", url)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(s.Series, "i0@")
}

// TestRecorderPhaseStartsNewSeries: after SetPhase, every target's samples go to a series of
// their own, named with the phase; the points before it stay where they were.
func TestRecorderPhaseStartsNewSeries(t *testing.T) {
	srv := metricsServer(t)
	rec := NewRecorder(Config{Every: probeEvery, Warmup: time.Nanosecond,
		Target: func() map[string]string { return map[string]string{"i0": srv.URL} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rec.Run(ctx) }()
	name := "i0@" + startTime(t, srv.URL)
	waitPoints := func(series string) {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if len(rec.Result().Series["goroutines"][series]) >= 3 {
				return
			}
		}
		t.Fatalf("no points in %q: %v", series, rec.Result().Observed)
	}
	waitPoints(name)
	rec.SetPhase("lock+guard")
	before := len(rec.Result().Series["goroutines"][name])
	waitPoints(name + " [lock+guard]")
	cancel()
	<-done
	res := rec.Result()
	if got := len(res.Series["goroutines"][name]); got > before+1 { // one probe may have been in flight
		t.Fatalf("the series before the phase grew from %d to %d points", before, got)
	}
	if !slices.Contains(res.Observed, name+" [lock+guard]") {
		t.Fatalf("observed %v", res.Observed)
	}
}
