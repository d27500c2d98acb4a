//go:build !nodemo

package lab_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/stockguard/stockguard/internal/procutil"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/lab"
)

// binDir holds the storefront this test binary built, if it built one.
var binDir string

// storefrontBinary builds the stockguard command once per test binary, or takes the one make
// test built for the run (STOCKGUARD_BIN, internal/storefrontbin): the supervisor's instances
// are real storefront processes.
var storefrontBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "stockguard-lab-test-")
	if err != nil {
		return "", err
	}
	binDir = dir
	return storefrontbin.Shared(context.Background(), "..", dir)
})

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// labServer is a supervisor under test, served on a loopback port.
type labServer struct {
	t   *testing.T
	url string
	sup *lab.Supervisor
	ctx context.Context // the supervisor's run: cancelled, with a cause, when it gives up on an instance
}

// startLab starts a supervisor of n storefront instances (the stockguard command, --demo) on
// a real redis-server and a SQLite file, serves it, and resets the lab catalogue; it returns
// the server and the ids of the three lab items.
func startLab(t *testing.T, n int) (*labServer, []int64) {
	t.Helper()
	testutil.SkipShort(t, testutil.MultiProcess)
	exe, err := storefrontBinary()
	require.NoError(t, err)
	rs := redistest.Start(t)
	const lease = 2 * time.Second // a Redis call may take lease/10: 1s would leave 100ms, short for -race on a busy machine
	sup := lab.NewSupervisor(lab.SupervisorConfig{
		Executable: exe,
		Args: []string{"--demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "lab.db"),
			"--redis", rs.URL(), "--admin-token", "lab-test", "--lock-lease", lease.String(), "--log-level", "warn"},
		Instances: n, Redis: rs.Client(t), Lease: lease, PauseFor: 3 * lease, Output: testWriter{t},
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil); sup.Stop(10 * time.Second) })
	require.NoError(t, sup.Start(ctx, cancel))
	srv := &http.Server{Handler: sup.Handler(), ReadHeaderTimeout: 5 * time.Second}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s := &labServer{t: t, url: "http://" + ln.Addr().String(), sup: sup, ctx: ctx}
	var items []struct {
		ID int64 `json:"id"`
	}
	require.Equal(t, 200, s.call("POST", "/i/0/api/lab/reset", "{}", &items))
	require.Len(t, items, 3)
	return s, []int64{items[0].ID, items[1].ID, items[2].ID}
}

// testWriter logs the instances' lines through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// call sends one request and decodes a JSON answer into out (when not nil).
func (s *labServer) call(method, path, body string, out any) int {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(s.t, err)
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

type labResult struct {
	Verdict  string         `json:"verdict"`
	Sold     int            `json:"sold"`
	Oversold int            `json:"oversold"`
	Answers  map[string]int `json:"answers"`
	Paused   *struct {
		Instance int   `json:"instance"`
		PID      int   `json:"pid"`
		Token    int64 `json:"token"`
	} `json:"paused"`
}

func labRunBody(strategy string, buyers, workMS int, item int64, fault string) string {
	return fmt.Sprintf(`{"strategy":%q,"buyers":%d,"work_ms":%d,"quantity":1,"item":%d,"fault":%q}`, strategy, buyers, workMS, item, fault)
}

// The supervisor starts its instances, proxies their APIs, shows local failing across
// processes, SIGSTOPs a lock holder and continues it, and stops its instances with itself.
func TestLabSupervisor(t *testing.T) {
	s, items := startLab(t, 2)
	var info struct {
		Instances []struct {
			Index int    `json:"index"`
			PID   int    `json:"pid"`
			Base  string `json:"base"`
		} `json:"instances"`
		Pause bool `json:"pause"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	require.Len(t, info.Instances, 2)
	assert.True(t, info.Pause)
	assert.Equal(t, "/i/1", info.Instances[1].Base)
	assert.NotEqual(t, info.Instances[0].PID, info.Instances[1].PID)
	assert.NotEqual(t, os.Getpid(), info.Instances[0].PID)

	// /readyz: ready while every instance answers its own; a SIGSTOPped instance makes it 503,
	// named; after SIGCONT it is ready again.
	var ready struct {
		Status    string `json:"status"`
		Instances []struct {
			Index int  `json:"index"`
			Ready bool `json:"ready"`
		} `json:"instances"`
	}
	require.Equal(t, 200, s.call("GET", "/readyz", "", &ready))
	assert.Equal(t, "ok", ready.Status)
	assert.Len(t, ready.Instances, 2)
	require.NoError(t, syscall.Kill(info.Instances[1].PID, syscall.SIGSTOP))
	waitStopped(t, info.Instances[1].PID)
	var notReady struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	status := s.call("GET", "/readyz", "", &notReady)
	require.NoError(t, syscall.Kill(info.Instances[1].PID, syscall.SIGCONT))
	assert.Equal(t, 503, status)
	assert.Equal(t, "unavailable", notReady.Error.Code)
	assert.Contains(t, notReady.Error.Message, fmt.Sprintf("instance 1 (pid %d)", info.Instances[1].PID))
	assert.NotContains(t, notReady.Error.Message, "instance 0", "the running instance is not named")
	require.Equal(t, 200, s.call("GET", "/readyz", "", &ready), "ready again after SIGCONT")

	var r labResult
	require.Equal(t, 200, s.call("POST", "/api/lab/run", labRunBody("local", 20, 30, items[0], ""), &r))
	assert.NotEqual(t, "SAFE", r.Verdict, "local across two processes: %+v", r)

	r = labResult{}
	require.Equal(t, 200, s.call("POST", "/api/lab/run", labRunBody("lock+guard", 6, 300, items[1], "pause"), &r))
	require.NotNil(t, r.Paused, "%+v", r)
	assert.Contains(t, []int{info.Instances[0].PID, info.Instances[1].PID}, r.Paused.PID)
	assert.Equal(t, "SAFE", r.Verdict, "%+v", r)
	total := 0
	for _, n := range r.Answers {
		total += n
	}
	assert.Equal(t, 6, total, "every buyer got an answer after SIGCONT: %v", r.Answers)

	var n struct {
		Note   string `json:"note"`
		Paused any    `json:"paused"`
	}
	require.Equal(t, 200, s.call("POST", "/api/lab/run", labRunBody("guard", 2, 0, items[2], "pause"), &n))
	assert.Nil(t, n.Paused)
	assert.Contains(t, n.Note, "takes no lock", "takes_lock of GET /api/strategies")

	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	assert.Equal(t, 409, s.call("POST", "/api/lab/pause", fmt.Sprintf(`{"item":%d}`, items[2]), &e))
	assert.Equal(t, "not_held", e.Error.Code)
	assert.Equal(t, 404, s.call("GET", "/i/7/api/items", "", &e))
	assert.Equal(t, "not_found", e.Error.Code)

	s.sup.Stop(10 * time.Second)
	for _, in := range info.Instances {
		assert.True(t, errors.Is(syscall.Kill(in.PID, 0), syscall.ESRCH), "instance pid %d stopped with the supervisor", in.PID)
	}
}

// waitStopped waits until every thread of process pid is stopped (SIGSTOP reaches the threads
// of a process one by one: one still running may answer a request sent right after kill).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return procutil.Stopped(pid) }, 5*time.Second, time.Millisecond, "process %d stopped", pid)
}
