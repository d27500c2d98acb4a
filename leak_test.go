package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/testutil"
)

// goroutines reads go_goroutines from s's /metrics.
func goroutines(t *testing.T, s *server) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go_goroutines (\d+)$`).FindStringSubmatch(metricsText(t, s))
	require.NotNil(t, m, "go_goroutines on /metrics")
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// leakGrowth buys n units one at a time (after a warm-up purchase) and returns how much
// go_goroutines grew, read once the answers are in.
func leakGrowth(t *testing.T, s *server, n int) int {
	t.Helper()
	var items []item
	reset := `{"items":[{"sku":"L","name":"leak","stock":100000,"price_cents":1}]}`
	require.Equal(t, http.StatusOK, s.call("POST", "/api/admin/reset", reset, &items, "Authorization: Bearer leak-token"))
	path := fmt.Sprintf("/api/items/%d/purchase", items[0].ID)
	require.Equal(t, http.StatusCreated, s.call("POST", path, `{"quantity":1}`, nil))
	before := goroutines(t, s)
	for range n {
		require.Equal(t, http.StatusCreated, s.call("POST", path, `{"quantity":1}`, nil))
	}
	return goroutines(t, s) - before
}

func leakArgs(t *testing.T) []string {
	return []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "leak.db"),
		"--admin-token", "leak-token", "--shutdown-timeout", "10s", "--log-level", "warn"}
}

// A storefront built with -tags leaktest keeps one goroutine per purchase (the test-only leak
// a soak must catch, run through the load test's -bin): its go_goroutines grows by the
// purchases, while this test binary's storefront (built without the tag) does not grow with
// them.
func TestLeakBuildKeepsAGoroutinePerPurchase(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess) // builds the storefront and runs it
	const n = 60
	plain := startServer(t, nil, leakArgs(t)...)
	grew := leakGrowth(t, plain, n)
	t.Logf("untagged: go_goroutines grew by %d over %d purchases", grew, n)
	assert.Less(t, grew, n/2, "the untagged storefront's goroutines do not grow with its purchases")

	leaky := startBinary(t, buildBinary(t, handlers.LeakTag), leakArgs(t)...)
	assert.Contains(t, leaky.logs.String(), "built with -tags "+handlers.LeakTag)
	grew = leakGrowth(t, leaky, n)
	t.Logf("-tags %s: go_goroutines grew by %d over %d purchases", handlers.LeakTag, grew, n)
	assert.GreaterOrEqual(t, grew, n-n/10, "one goroutine kept per purchase")
}

// buildBinary builds the storefront (go build, with tags when given) into a temporary file and
// returns its path, or returns the one make test built for the run (internal/storefrontbin:
// STOCKGUARD_BIN_LEAKTEST for the leaktest tag).
func buildBinary(t *testing.T, tags ...string) string {
	t.Helper()
	bin, err := storefrontbin.Shared(context.Background(), ".", t.TempDir(), tags...)
	require.NoError(t, err)
	return bin
}

// startBinary runs the storefront binary bin with args (no environment: an in-process Redis)
// and waits for it to listen; it is stopped when t ends.
func startBinary(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	return startBinaryEnv(t, bin, nil, args...)
}

// startBinaryEnv is startBinary with env as the process's whole environment. It is stopped with
// SIGINT (graceful: a traced storefront flushes its spans) when t ends.
func startBinaryEnv(t *testing.T, bin string, env map[string]string, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	s := &server{t: t, logs: &logSink{addrs: make(chan string, 1)}, stop: cancel, done: make(chan int, 1)}
	require.NoError(t, cmd.Start())
	lines := make(chan struct{})
	go func() { // one Write per line, as the in-process logger does
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			_, _ = s.logs.Write(append(sc.Bytes(), '\n'))
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-lines
		err := cmd.Wait()
		code := 0
		if err != nil {
			code = 1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
		}
		s.done <- code
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Error("storefront binary did not stop")
		}
		if t.Failed() {
			t.Logf("storefront log:\n%s", s.logs)
		}
	})
	select {
	case addr := <-s.logs.addrs:
		s.url = "http://" + strings.TrimSpace(addr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no listening line after 30s:\n%s", s.logs)
	}
	return s
}

// The database pool's statistics are on /metrics (collectors.NewDBStatsCollector), labelled
// with the pool's name.
func TestMetricsExportTheDatabasePool(t *testing.T) {
	s := startServer(t, nil, leakArgs(t)...)
	text := metricsText(t, s)
	for _, name := range []string{"go_sql_open_connections", "go_sql_in_use_connections", "go_sql_idle_connections",
		"go_sql_max_open_connections", "go_sql_wait_count_total"} {
		assert.Regexp(t, `(?m)^`+name+`\{db_name="`+handlers.DBStatsName+`"\} \d+`, text)
	}
}
