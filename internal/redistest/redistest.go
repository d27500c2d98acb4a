// Package redistest starts real redis-server processes for tests.
//
// Each Server listens on a free loopback port, keeps no data on disk (no RDB, no AOF), and is
// stopped when the test (or TestMain) that started it ends. A Server can be stopped, restarted
// on the same port, and paused with SIGSTOP to simulate a black-holed Redis: connections are
// accepted by the kernel but nothing is answered.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/internal/testutil"
)

// go-redis logs each failed dial of its pools through a package-level logger (log.Printf to
// stderr). The tests stop, kill and pause their servers on purpose, so that went to thousands of
// "connection refused" lines a run, from goroutines of go-redis's pool that outlived their test
// while their write to a full stderr pipe waited (goleak named one in a loaded make test). The
// clients' errors reach the code under test as errors; the log adds nothing: it is dropped in
// every test binary that starts a redis-server through this package.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// ErrNoRedisServer is returned when redis-server is not on PATH.
var ErrNoRedisServer = errors.New("redistest: redis-server not found on PATH; install it with `apt-get install -y redis-server` (Debian package redis-server) or run `make test`, which does")

// Server is one redis-server child process on a loopback port.
type Server struct {
	mu     sync.Mutex
	port   int
	path   string
	opts   redisproc.ChildOptions
	proc   *redisproc.Server // nil while stopped
	paused bool
}

// New starts a redis-server on a free loopback port. The caller must call Close.
// Use Start in tests; New is for TestMain, where there is no testing.TB.
func New() (*Server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	proc, err := redisproc.StartChild(path, 0)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return &Server{port: portOf(proc.Addr), path: path, proc: proc}, nil
}

// StartIn starts a redis-server for tb whose RDB snapshots (SAVE, BGSAVE) go to dir/dump.rdb,
// and stops it when tb ends. Restart then starts a server that loads the last snapshot: what
// a Redis restarted after a crash remembers.
func StartIn(tb testing.TB, dir string) *Server {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(ErrNoRedisServer)
	}
	opts := redisproc.ChildOptions{Dir: dir}
	proc, err := redisproc.StartChildOpts(path, 0, opts)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s := &Server{port: portOf(proc.Addr), path: path, opts: opts, proc: proc}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Start starts a redis-server for tb and stops it when tb ends. It fails tb if redis-server is
// missing or does not come up.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Addr returns host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the server as a redis:// URL (database 0).
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Options returns go-redis options for the server with ContextTimeoutEnabled set, so that
// context deadlines bound every call, and short dial/read/write timeouts.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:                  s.Addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		MaxRetries:            -1,
	}
}

// Client returns a new client for the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server (no data is kept) and waits for it to exit. The port stays reserved
// for Restart only by convention: nothing else in the test should take it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.proc != nil {
		s.proc.Kill()
		s.proc, s.paused = nil, false
	}
}

// Restart stops the server if it runs (SIGKILL: nothing is saved) and starts a fresh one on
// the same port: empty, or, for a server of StartIn, loaded from its last snapshot.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the old socket may linger briefly
		if s.proc, err = redisproc.StartChildOpts(s.path, s.port, s.opts); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("redistest: restart on %s: %v", s.Addr(), err)
}

// Pause stops the process with SIGSTOP: the kernel still accepts connections, but no command
// is answered, as with a black-holed network. Resume undoes it.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.paused {
		_ = s.proc.Signal(syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused server.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.paused {
		_ = s.proc.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

// Close stops the server.
func (s *Server) Close() error {
	s.Stop()
	return nil
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// StartCluster starts a Redis Cluster of three masters (redis-server --cluster-enabled yes,
// joined by internal/redisproc) for tb and stops it when tb ends.
func StartCluster(tb testing.TB) *redisproc.Cluster {
	tb.Helper()
	testutil.SkipShort(tb, testutil.MultiProcess)
	path, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(ErrNoRedisServer)
	}
	c, err := redisproc.StartCluster(path, 3)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// ClusterClient returns a cluster client of c with the options of Server.Options, closed
// when tb ends.
func ClusterClient(tb testing.TB, c *redisproc.Cluster) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: -1})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// StartSentinel starts one master, one replica and three Sentinels (down-after 500ms,
// failover-timeout 2s) for tb and stops them when tb ends.
func StartSentinel(tb testing.TB) *redisproc.SentinelSet {
	tb.Helper()
	testutil.SkipShort(tb, testutil.MultiProcess)
	path, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(ErrNoRedisServer)
	}
	s, err := redisproc.StartSentinelSet(path, redisproc.SentinelConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// FailoverClient returns a Sentinel-backed client of s with the options of Server.Options,
// closed when tb ends.
func FailoverClient(tb testing.TB, s *redisproc.SentinelSet) *redis.Client {
	tb.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs(),
		ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, MaxRetries: -1})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
