package tracing_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/tracing"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

// BenchmarkTracedPurchase measures what tracing costs a purchase: the storefront wired as
// main wires it (handlers over inventory over a real redis-server and an SQLite file), a
// lock+guard purchase per op through the Gin handler, with tracing off (nothing installed)
// and on at 100 % sampling, every span exported over OTLP/HTTP to a loopback receiver that
// reads each batch and answers 200 (the export's serialization and its HTTP post are
// counted; a collector's work is not). It reports the process's CPU time per purchase beside
// the wall time. Run the two interleaved, several times, and compare
// them within one run: go test -run '^$' -bench TracedPurchase -benchmem -count 6
// ./internal/tracing.
func BenchmarkTracedPurchase(b *testing.B) {
	var exported atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exported.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()
	srv := redistest.Start(b)
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			env := map[string]string{tracing.EnvSampler: "always_on"}
			if mode == "on" {
				env[tracing.EnvEndpoint] = recv.URL
			}
			h, ids := storefront(b, srv, func(k string) string { return env[k] })
			before, cpu := exported.Load(), cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				req := httptest.NewRequest(http.MethodPost, fmt.Sprintf("/api/items/%d/purchase", ids[i%len(ids)]), strings.NewReader(`{"quantity":1}`))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusCreated {
					b.Fatalf("purchase: %d %s", rec.Code, rec.Body)
				}
			}
			b.StopTimer()
			// The process's CPU time (the handler, inventory, SQLite, the exporter; not
			// redis-server's) per purchase: on a shared machine, steadier than the wall time.
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			if mode == "on" {
				b.ReportMetric(float64(exported.Load()-before)/float64(b.N), "exported-B/op")
			}
		})
	}
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// storefront wires the storefront's handler as main's serve does, tracing as getenv says.
func storefront(b *testing.B, srv *redistest.Server, getenv func(string) string) (http.Handler, []int64) {
	tr, err := tracing.FromEnv(getenv)
	require.NoError(b, err)
	b.Cleanup(func() { _ = tr.Close() })
	path := filepath.Join(b.TempDir(), "cost.db")
	db, err := models.Open(context.Background(), path, models.WithOpenDB(tr.OpenDB("sqlite")))
	require.NoError(b, err)
	b.Cleanup(func() { _ = models.Close(db) })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	require.NoError(b, tr.InstrumentRedis(rdb))
	lc := locking.New(rdb, &locking.Options{KeyPrefix: fmt.Sprintf("cost:%s:", b.Name())})
	b.Cleanup(func() { _ = lc.Close() })
	svc, err := inventory.NewService(inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Tracer: tr.Tracer()})
	require.NoError(b, err)
	b.Cleanup(func() { _ = svc.Close() })
	items := make([]inventory.NewItem, 10)
	for i := range items {
		items[i] = inventory.NewItem{SKU: fmt.Sprint("SKU-", i), Name: "item", Stock: 1 << 30, PriceCents: 1}
	}
	require.NoError(b, svc.Reset(context.Background(), items))
	list, err := svc.ListItems(context.Background())
	require.NoError(b, err)
	ids := make([]int64, len(list))
	for i, it := range list {
		ids[i] = it.ID
	}
	h := handlers.New(handlers.Config{Service: svc, Logger: slog.New(slog.DiscardHandler), Trace: tr.Gin()})
	return h, ids
}
