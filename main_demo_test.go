//go:build !nodemo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// childEnv makes the test binary run as the storefront: the lab supervisor starts its own
// executable as its instances, and in tests that is this binary.
const childEnv = "STOCKGUARD_TEST_AS_STOREFRONT"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := m.Run()
	if testing.Verbose() {
		fmt.Printf("openapi: %d answers checked against the document\n", apiDoc.Checked())
	}
	if v := apiDoc.Violations(); len(v) > 0 { // openapi_test.go: also each request's error
		fmt.Fprintf(os.Stderr, "%d answers broke the OpenAPI document:\n%s\n", len(v), strings.Join(v, "\n"))
		code = max(code, 1)
	}
	os.Exit(code)
}

// `--demo --instances 1` serves the lab over one storefront child that shares the
// supervisor's Redis and admin token, and stops the child with itself. (Package lab tests the
// lab; this is the command's wiring of it.)
func TestDemoInstances(t *testing.T) {
	t.Setenv(childEnv, "1")
	rs := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--instances", "1", "--redis", rs.URL(), "--lock-lease", "2s")...)
	var info struct {
		Instances []struct {
			PID  int    `json:"pid"`
			Base string `json:"base"`
		} `json:"instances"`
		LeaseMS float64 `json:"lease_ms"`
		Pause   bool    `json:"pause"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	require.Len(t, info.Instances, 1)
	assert.True(t, info.Pause)
	assert.EqualValues(t, 2000, info.LeaseMS)
	assert.NotEqual(t, os.Getpid(), info.Instances[0].PID)
	var items []item
	require.Equal(t, 200, s.call("POST", "/i/0/api/lab/reset", "{}", &items))
	require.Len(t, items, 3)
	// The admin token reaches the instance through its environment, not its command line.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", info.Instances[0].PID))
	require.NoError(t, err)
	assert.NotContains(t, string(cmdline), "e2e-token", "the token is not on the instance's command line (ps shows it)")
	assert.NotContains(t, string(cmdline), "admin-token")
	// Nor the database's and Redis's URLs, which may carry passwords: they go the same way.
	assert.NotContains(t, string(cmdline), rs.URL(), "the Redis URL is not on the instance's command line")
	assert.NotContains(t, string(cmdline), "--db\x00", "nor the database URL")
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", info.Instances[0].PID))
	require.NoError(t, err)
	assert.Contains(t, string(environ), "REDIS_URL="+rs.URL())
	assert.Equal(t, 200, s.call("POST", "/i/0/api/admin/reset", `{"items":[{"sku":"A","name":"a","stock":1,"price_cents":1}]}`, nil,
		"Authorization: Bearer e2e-token"), "the instance knows the token")
	assert.Equal(t, 401, s.call("POST", "/i/0/api/admin/reset", `{"items":[]}`, nil, "Authorization: Bearer wrong"))
	assert.Contains(t, s.logs.String(), `msg="open the lock lab" url=http://127.0.0.1:`)
	// An open lab page keeps an instance's event stream open through the supervisor: the
	// stream ends as shutdown begins, which then finishes in time (exit 0, not the shutdown
	// timeout's error).
	res, err := http.Get(s.url + "/i/0/api/events")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	streamEnded := make(chan struct{})
	go func() {
		defer close(streamEnded)
		_, _ = io.Copy(io.Discard, res.Body)
	}()
	require.Equal(t, 0, s.shutdown(), "shutdown with a lab page open")
	<-streamEnded
	assert.True(t, errors.Is(syscall.Kill(info.Instances[0].PID, 0), syscall.ESRCH), "the instance stopped with the supervisor")
}

// A --demo storefront serves the lab page, its event stream and the demo strategies.
func TestDemoStorefrontServesTheLab(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--redis", rs.URL())...)
	var info struct {
		Instances []struct {
			PID int `json:"pid"`
		} `json:"instances"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	require.Len(t, info.Instances, 1)
	assert.Equal(t, os.Getpid(), info.Instances[0].PID, "the lab of this one process")
	var r struct {
		Strategy string `json:"strategy"`
	}
	require.Equal(t, 201, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &r, "X-Strategy: setnx-expire"))
	assert.Equal(t, "setnx-expire", r.Strategy)
	assert.Equal(t, 0, s.shutdown())
}

// On an address beyond loopback the demo is exposed: the lab's run, pause, kill, lease, kill lesson and reset, and the
// profiles, of the supervisor and of its instances under /i/, take the admin token; reading
// and buying do not. It says so at start-up.
func TestDemoExposedNeedsToken(t *testing.T) {
	t.Setenv(childEnv, "1")
	rs := redistest.Start(t)
	args := []string{"--demo", "--instances", "1", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "x.db"),
		"--admin-token", "e2e-token", "--redis", rs.URL(), "--lock-lease", "2s", "--log-level", "warn"}
	s := startServer(t, nil, args...)
	require.Eventually(t, func() bool { return strings.Contains(s.logs.String(), "need Authorization: Bearer <admin token>") },
		5*time.Second, 10*time.Millisecond, "the start-up says what needs the token")
	var info struct {
		TokenRequired bool `json:"token_required"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	assert.True(t, info.TokenRequired)
	bearer := "Authorization: Bearer e2e-token"
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/i/0/api/lab/reset", "{}"},
		{"POST", "/i/0//api/lab/reset", "{}"},
		{"POST", "/api/lab/pause", `{"item":1}`},
		{"POST", "/api/lab/kill", `{"item":1}`},
		{"POST", "/api/lab/lease", `{"lease_ms":10000}`},
		{"POST", "/api/lab/takeover", `{"items":[1,2],"buyers":1,"work_ms":0,"quantity":1}`},
		{"POST", "/api/lab/run", `{"strategy":"naive","buyers":1,"work_ms":0,"quantity":1,"item":1,"fault":""}`},
		{"GET", "/i/0/debug/pprof/", ""},
		{"GET", "/i/0/debug/pprof/cmdline", ""},
	} {
		assert.Equal(t, http.StatusUnauthorized, s.call(tt.method, tt.path, tt.body, nil), "%s %s without the token", tt.method, tt.path)
		assert.Equal(t, http.StatusUnauthorized, s.call(tt.method, tt.path, tt.body, nil, "Authorization: Bearer nope"), "%s %s", tt.method, tt.path)
	}
	var items []item
	require.Equal(t, 200, s.call("POST", "/i/0/api/lab/reset", "{}", &items, bearer))
	assert.Equal(t, 200, s.call("GET", "/i/0/debug/pprof/", "", nil, bearer))
	assert.Equal(t, 200, s.call("GET", "/i/0/api/items", "", nil), "reading needs no token")
	assert.Equal(t, 201, s.call("POST", fmt.Sprintf("/i/0/api/items/%d/purchase", items[0].ID), `{"quantity":1}`, nil), "buying needs none")
	require.Equal(t, 0, s.shutdown())
}

// A lone --demo storefront beyond loopback guards its own lab routes and profiles.
func TestDemoStorefrontExposedNeedsToken(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, "--demo", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "x.db"),
		"--admin-token", "e2e-token", "--redis", rs.URL(), "--log-level", "warn")
	assert.Equal(t, http.StatusUnauthorized, s.call("POST", "/api/lab/reset", "{}", nil))
	assert.Equal(t, http.StatusUnauthorized, s.call("GET", "/debug/pprof/", "", nil))
	assert.Equal(t, http.StatusOK, s.call("GET", "/debug/pprof/", "", nil, "Authorization: Bearer e2e-token"))
	assert.Equal(t, http.StatusOK, s.call("POST", "/api/lab/reset", "{}", nil, "Authorization: Bearer e2e-token"))
	require.Equal(t, 0, s.shutdown())
}

// --demo without --db runs on a fresh file of its own, removed at exit: the storefront's
// stockguard.db is never created nor touched, so the lab cannot change what the README's
// storefront examples print.
func TestDemoFreshDatabase(t *testing.T) {
	t.Chdir(t.TempDir())
	rs := redistest.Start(t)
	s := startServer(t, nil, "--demo", "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--admin-token", "e2e-token")
	path := s.logs.field("demo database: a fresh SQLite file, deleted at exit (--db keeps one)", "path")
	require.NotEmpty(t, path, s.logs.String())
	_, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, 200, s.call("POST", "/api/lab/reset", "{}", nil))
	require.Equal(t, 0, s.shutdown())
	_, err = os.Stat(path)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the demo database is removed at exit")
	_, err = os.Stat("stockguard.db")
	assert.True(t, errors.Is(err, os.ErrNotExist), "the storefront's database is not created")
}

// The first screen of `go run . --demo --instances 2` as a terminal shows it (the process's
// whole stderr, go-redis's own lines included, with a redis-server child started here and the
// default log level) has no line that looks like an error, and links to the lab.
func TestDemoFirstScreen(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "--demo", "--instances", "2", "--addr", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out := &logSink{addrs: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the demo did not stop")
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "open the lock lab") }, 30*time.Second, 20*time.Millisecond,
		"no link to the lab:\n%s", out)
	screen := out.String()
	require.Contains(t, screen, "mode=child", "a redis-server child, as on a fresh clone with redis-server installed")
	for _, line := range strings.Split(strings.TrimSpace(screen), "\n") {
		lower := strings.ToLower(line)
		for _, bad := range []string{"level=error", "level=warn", "fail", "refused", "error", "\\n"} {
			assert.NotContains(t, lower, bad, "start-up line %q", line)
		}
	}
}
