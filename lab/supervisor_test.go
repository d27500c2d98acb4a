package lab_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"

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
	os.Exit(m.Run())
}

// startLab starts `stockguard --demo --instances n` (in this process; its instances are
// child processes) on a real redis-server and resets the lab catalogue; it returns the
// supervisor and the ids of the three lab items.
func startLab(t *testing.T, n int) (*server, []int64) {
	t.Helper()
	t.Setenv(childEnv, "1")
	rs := redistest.Start(t)
	args := append(baseArgs(t), "--instances", strconv.Itoa(n), "--redis", rs.URL(),
		"--lock-lease", "2s") // a Redis call may take lease/10: 1s would leave 100ms, short for -race on a busy machine
	s := startServer(t, nil, args...)
	var items []item
	require.Equal(t, 200, s.call("POST", "/i/0/api/lab/reset", "{}", &items))
	require.Len(t, items, 3)
	return s, []int64{items[0].ID, items[1].ID, items[2].ID}
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

	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	assert.Equal(t, 409, s.call("POST", "/api/lab/pause", fmt.Sprintf(`{"item":%d}`, items[2]), &e))
	assert.Equal(t, "not_held", e.Error.Code)
	assert.Equal(t, 404, s.call("GET", "/i/7/api/items", "", &e))

	require.Equal(t, 0, s.shutdown())
	for _, in := range info.Instances {
		assert.True(t, errors.Is(syscall.Kill(in.PID, 0), syscall.ESRCH), "instance pid %d stopped with the supervisor", in.PID)
	}
}

func TestInstancesNeedsDemo(t *testing.T) {
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"--instances", "2"}, func(string) string { return "" }, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "--instances needs --demo")
}
