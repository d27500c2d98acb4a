package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/internal/redistest"
)

// logSink collects the server's log lines and reports the address of the "listening" line.
type logSink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addrs chan string
}

// listeningRE matches this process's "listening" line (not a lab instance's, which the
// supervisor copies with an "instance=N " prefix).
var listeningRE = regexp.MustCompile(`^time=\S+ level=\S+ msg="?listening"?\s.*?\baddr=(\S+)`)

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if m := listeningRE.FindSubmatch(p); m != nil {
		select {
		case s.addrs <- string(m[1]):
		default:
		}
	}
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// field returns the value of key= in the first log line whose message is msg.
func (s *logSink) field(msg, key string) string {
	for _, line := range strings.Split(s.String(), "\n") {
		if strings.Contains(line, "msg="+msg+" ") || strings.Contains(line, `msg="`+msg) {
			if m := regexp.MustCompile(`\b` + key + `=(\S+)`).FindStringSubmatch(line); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// server is one run() in this process.
type server struct {
	t    *testing.T
	url  string
	logs *logSink
	stop context.CancelFunc
	done chan int
}

// startServer runs run(args) with env as its whole environment and waits for it to listen.
func startServer(t *testing.T, env map[string]string, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{t: t, logs: &logSink{addrs: make(chan string, 1)}, stop: cancel, done: make(chan int, 1)}
	getenv := func(k string) string { return env[k] }
	go func() { s.done <- run(ctx, args, getenv, s.logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Error("server did not stop")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", s.logs)
		}
	})
	select {
	case addr := <-s.logs.addrs:
		s.url = "http://" + addr
	case code := <-s.done:
		s.done <- code
		t.Fatalf("run exited with %d before listening:\n%s", code, s.logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("no listening line after 20s:\n%s", s.logs)
	}
	return s
}

// shutdown stops the server and returns run's exit code.
func (s *server) shutdown() int {
	s.t.Helper()
	s.stop()
	select {
	case code := <-s.done:
		s.done <- code // for the cleanup
		return code
	case <-time.After(20 * time.Second):
		s.t.Fatal("server did not stop within 20s")
		return -1
	}
}

// call sends one request and decodes a JSON answer into out (when not nil).
func (s *server) call(method, path, body string, out any, headers ...string) int {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(s.t, err)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(b, out), "%s %s: %s", method, path, b)
	}
	return res.StatusCode
}

func baseArgs(t *testing.T) []string {
	return []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "e2e.db"), "--demo",
		"--admin-token", "e2e-token", "--shutdown-timeout", "10s", "--log-level", "warn"}
}

type item struct {
	ID    int64  `json:"id"`
	SKU   string `json:"sku"`
	Stock int    `json:"stock"`
}

// TestServeEachRedisMode runs the real server with a redis-server child process and with the
// in-process Redis, buys through HTTP (concurrently, with the default lock+guard strategy and
// with the lock strategy), and shuts down cleanly while a purchase is in flight.
func TestServeEachRedisMode(t *testing.T) {
	if _, err := lookPath("redis-server", os.Getenv("PATH")); err != nil {
		t.Fatal(redistest.ErrNoRedisServer)
	}
	for _, mode := range []struct {
		name string
		path string // PATH seen by run: decides whether redis-server is found
	}{
		{redisModeChild, os.Getenv("PATH")},
		{redisModeMemory, ""},
	} {
		t.Run(mode.name, func(t *testing.T) {
			args := baseArgs(t)
			s := startServer(t, map[string]string{"PATH": mode.path}, args...)
			assert.Equal(t, mode.name, s.logs.field("redis", "mode"))
			redisAddr := s.logs.field("redis", "addr")
			require.NotEmpty(t, redisAddr)

			// Keys expire in real time (miniredis only does when its clock is advanced).
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			defer rdb.Close()
			require.NoError(t, rdb.Set(context.Background(), "e2e:ttl", "x", 100*time.Millisecond).Err())
			require.Eventually(t, func() bool {
				return rdb.Exists(context.Background(), "e2e:ttl").Val() == 0
			}, 2*time.Second, 20*time.Millisecond, "a key with a 100ms TTL did not expire")

			var items []item
			require.Equal(t, http.StatusOK, s.call("GET", "/api/items", "", &items))
			require.NotEmpty(t, items)
			require.Equal(t, http.StatusOK, s.call("GET", "/readyz", "", nil))

			// Reset to one item of 10 units and let 16 buyers race for it.
			reset := `{"items":[{"sku":"E2E","name":"e2e","stock":10,"price_cents":1}]}`
			require.Equal(t, http.StatusOK, s.call("POST", "/api/admin/reset", reset, &items, "Authorization: Bearer e2e-token"))
			id := items[0].ID
			codes := buyConcurrently(s, id, 16, "X-Simulated-Work: 5ms")
			assert.Equal(t, 10, codes[http.StatusCreated], "codes %v", codes)
			assert.Equal(t, 6, codes[http.StatusConflict], "codes %v", codes)
			var it item
			require.Equal(t, http.StatusOK, s.call("GET", fmt.Sprintf("/api/items/%d", id), "", &it))
			assert.Equal(t, 0, it.Stock)

			// The lock strategy works too, and the held lock shows on /api/debug/locks.
			require.Equal(t, http.StatusOK, s.call("POST", "/api/admin/reset", reset, &items, "Authorization: Bearer e2e-token"))
			id = items[0].ID
			inflight := make(chan int, 1)
			go func() {
				inflight <- s.call("POST", fmt.Sprintf("/api/items/%d/purchase", id), `{"quantity":2}`, nil,
					"X-Strategy: lock", "X-Simulated-Work: 600ms")
			}()
			var dbg struct {
				PID   int `json:"pid"`
				Locks []struct {
					Name  string `json:"name"`
					Token int64  `json:"token"`
				} `json:"locks"`
			}
			require.Eventually(t, func() bool {
				s.call("GET", "/api/debug/locks", "", &dbg)
				return len(dbg.Locks) == 1
			}, 3*time.Second, 20*time.Millisecond)
			assert.Equal(t, fmt.Sprintf("item:%d", id), dbg.Locks[0].Name)
			assert.Equal(t, os.Getpid(), dbg.PID)

			// Shut down while that purchase is in flight: it completes, then run returns 0.
			assert.Equal(t, 0, s.shutdown())
			assert.Equal(t, http.StatusCreated, <-inflight)
			assert.Contains(t, s.logs.String(), "msg=stopped")
			// The Redis it started is gone.
			_, err := net.DialTimeout("tcp", redisAddr, 200*time.Millisecond)
			assert.Error(t, err, "redis at %s still answers", redisAddr)
		})
	}
}

// buyConcurrently sends n purchases of one unit of item id at once; it returns the count of
// each status code.
func buyConcurrently(s *server, id int64, n int, headers ...string) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := s.call("POST", fmt.Sprintf("/api/items/%d/purchase", id), `{"quantity":1}`, nil, headers...)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return codes
}

// TestServeWithRedisURL points the server at an existing redis-server with --redis (the
// REDIS_URL environment variable would do the same).
func TestServeWithRedisURL(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, map[string]string{"REDIS_URL": rs.URL()}, baseArgs(t)...)
	assert.Equal(t, redisModeURL, s.logs.field("redis", "mode"))
	var r struct {
		FenceToken int64  `json:"fence_token"`
		Strategy   string `json:"strategy"`
	}
	require.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &r))
	assert.Equal(t, "lock+guard", r.Strategy)
	assert.Positive(t, r.FenceToken)
	// The fencing counter lives in that Redis, under the documented key layout.
	n, err := rs.Client(t).Get(context.Background(), "stockguard:lock:{item:1}:fence").Int64()
	require.NoError(t, err)
	assert.Equal(t, r.FenceToken, n)
	assert.Equal(t, 0, s.shutdown())
}

func TestGeneratedAdminToken(t *testing.T) {
	args := []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "tok.db")}
	s := startServer(t, map[string]string{"PATH": ""}, args...)
	token := s.logs.field("no --admin-token or ADMIN_TOKEN: generated one for this run", "admin_token")
	require.Len(t, token, 32)
	assert.Equal(t, 1, strings.Count(s.logs.String(), token), "printed once")
	body := `{"items":[{"sku":"A","name":"a","stock":1,"price_cents":1}]}`
	assert.Equal(t, http.StatusUnauthorized, s.call("POST", "/api/admin/reset", body, nil, "Authorization: Bearer wrong"))
	assert.Equal(t, http.StatusOK, s.call("POST", "/api/admin/reset", body, nil, "Authorization: Bearer "+token))
	// Not in demo mode: every demo header is refused, on every route that sells or holds.
	for _, h := range []string{"X-Strategy: naive", "X-Simulated-Work: 1ms", "X-Fault: stall", "X-Barrier: b"} {
		for _, r := range []struct{ path, body string }{
			{"/api/items/1/purchase", `{"quantity":1}`},
			{"/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`},
			{"/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`},
		} {
			assert.Equal(t, http.StatusBadRequest, s.call("POST", r.path, r.body, nil, h), "%s on %s", h, r.path)
		}
	}
	var items []struct {
		Stock int `json:"stock"`
	}
	require.Equal(t, http.StatusOK, s.call("GET", "/api/items", "", &items))
	require.Len(t, items, 1)
	assert.Equal(t, 1, items[0].Stock, "nothing sold or held")
	assert.Equal(t, 0, s.shutdown())
}

// TestServeWithRedisDown starts with a --redis that does not answer: the server still comes
// up, /readyz says 503, lock strategies answer 503 unavailable quickly and guard still sells.
func TestServeWithRedisDown(t *testing.T) {
	port, err := redisproc.FreePort() // nothing listens there
	require.NoError(t, err)
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	s := startServer(t, nil, append(baseArgs(t), "--redis", url)...)
	assert.Equal(t, http.StatusServiceUnavailable, s.call("GET", "/readyz", "", nil))
	start := time.Now()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	assert.Equal(t, http.StatusServiceUnavailable, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &e))
	assert.Equal(t, "unavailable", e.Error.Code)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil, "X-Strategy: guard"))
	assert.Equal(t, 0, s.shutdown())
}
