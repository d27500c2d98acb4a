package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/redistest"
)

// server is one redis-server child process on a free loopback port, with no persistence:
// the main module's internal/redistest (its import path lies under the main module's, so
// this nested module may use it).
type server struct {
	*redistest.Server
	addr string
}

func startServer() (*server, error) {
	s, err := redistest.New()
	if err != nil {
		return nil, err
	}
	return &server{Server: s, addr: s.Addr()}, nil
}

func (s *server) stop() { _ = s.Close() }

// The servers of one `go test` run: started on first use, stopped by TestMain.
var (
	serversMu sync.Mutex
	servers   []*server
)

// nodes returns the first n servers of the run, starting them if needed. Every benchmark
// uses its own keys, so sharing servers between benchmarks is harmless.
func nodes(tb testing.TB, n int) []*server {
	tb.Helper()
	serversMu.Lock()
	defer serversMu.Unlock()
	for len(servers) < n {
		s, err := startServer()
		if err != nil {
			tb.Fatal(err)
		}
		servers = append(servers, s)
	}
	return servers[:n:n]
}

func TestMain(m *testing.M) {
	code := m.Run()
	serversMu.Lock()
	for _, s := range servers {
		s.stop()
	}
	serversMu.Unlock()
	os.Exit(code)
}

// callCounter is a go-redis hook counting the calls (round trips) a client makes, a pipeline
// as one, and the wall time spent in them.
type callCounter struct{ n, ns atomic.Int64 }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t := time.Now()
		err := next(ctx, cmd)
		c.ns.Add(int64(time.Since(t)))
		c.n.Add(1)
		return err
	}
}
func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t := time.Now()
		err := next(ctx, cmds)
		c.ns.Add(int64(time.Since(t)))
		c.n.Add(1)
		return err
	}
}

// clientOptions are the go-redis options of every client in the benchmarks, the same for
// each lock: context deadlines honoured (the stockguard lock requires it) and a pool large
// enough for 32 goroutines polling at once, so that no lock waits for a connection.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		PoolSize:              64,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	}
}

// newClient returns a client of s counting its calls in cc (nil: not counted), closed
// when tb ends.
func newClient(tb testing.TB, s *server, cc *callCounter) *redis.Client {
	tb.Helper()
	c := redis.NewClient(clientOptions(s.addr))
	if cc != nil {
		c.AddHook(cc)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// stats are counters of the redis-servers of a benchmark, summed over them.
type stats struct {
	commands int64   // total_commands_processed (INFO stats)
	cpu      float64 // used_cpu_sys + used_cpu_user, in seconds (INFO cpu)
	execUsec int64   // time executing EVALSHA, EVAL and PING, in µs (INFO commandstats)
}

// serverStats reads the servers' counters. Redis counts the commands a Lua script runs as
// well as the EVALSHA itself, and counts the INFO call made here.
func serverStats(tb testing.TB, ss []*server) stats {
	tb.Helper()
	var st stats
	for _, s := range ss {
		c := redis.NewClient(&redis.Options{Addr: s.addr})
		info, err := c.Info(context.Background(), "stats", "cpu", "commandstats").Result()
		_ = c.Close()
		if err != nil {
			tb.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "total_commands_processed":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.commands += n
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				st.cpu += f
			case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_ping":
				// calls=N,usec=U,usec_per_call=...: a script's usec includes its commands.
				for field := range strings.SplitSeq(v, ",") {
					if u, ok := strings.CutPrefix(field, "usec="); ok {
						n, _ := strconv.ParseInt(u, 10, 64)
						st.execUsec += n
					}
				}
			}
		}
	}
	return st
}

// sub returns the counters of a run that started at st0 (less the one INFO per server
// that read st0).
func (st stats) sub(st0 stats, servers int) stats {
	return stats{commands: st.commands - st0.commands - int64(servers), cpu: st.cpu - st0.cpu,
		execUsec: st.execUsec - st0.execUsec}
}
