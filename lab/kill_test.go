//go:build !nodemo

package lab_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// labInstances returns the pids of GET /api/lab's instances, by index, and the lease.
func labInstances(t *testing.T, s *labServer) ([]int, float64) {
	t.Helper()
	var info struct {
		Instances []struct {
			PID int `json:"pid"`
		} `json:"instances"`
		LeaseMS float64 `json:"lease_ms"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	pids := make([]int, len(info.Instances))
	for i, in := range info.Instances {
		pids[i] = in.PID
	}
	return pids, info.LeaseMS
}

// A run with the kill fault kills the item's lock holder with SIGKILL: lock+guard's waiters
// on the other instances take its lock over and sell (the sales gap, from the kill to the
// first 201 of a survivor, is in the answer), nothing is oversold, and the supervisor starts
// the killed instance again (a new process, the same index) instead of stopping. The lease is
// changed by starting every instance again; kill, lease and the kill lesson are refused to
// other web pages, as pause is.
func TestLabKillRestarts(t *testing.T) {
	s, items := startLab(t, 3)
	before, lease := labInstances(t, s)
	assert.Equal(t, 2000.0, lease)

	var r struct {
		labResult
		Killed []struct {
			Instance int     `json:"instance"`
			PID      int     `json:"pid"`
			Item     int64   `json:"item"`
			Token    int64   `json:"token"`
			AtMS     float64 `json:"at_ms"`
			LeaseEnd float64 `json:"lease_end_ms"`
		} `json:"killed"`
		GapMS *float64 `json:"gap_ms"`
	}
	require.Equal(t, 200, s.call("POST", "/api/lab/run", labRunBody("lock+guard", 9, 200, items[0], "kill"), &r))
	require.Len(t, r.Killed, 1, "%+v", r)
	k := r.Killed[0]
	assert.Equal(t, before[k.Instance], k.PID, "the holder killed is one of the instances")
	assert.Equal(t, items[0], k.Item)
	assert.Greater(t, k.LeaseEnd, k.AtMS, "the lease Redis showed, still running at the kill")
	assert.LessOrEqual(t, k.LeaseEnd, k.AtMS+lease, "at most a lease from the kill")
	assert.Equal(t, "SAFE", r.Verdict, "%+v", r)
	assert.Zero(t, r.Oversold)
	require.NotNil(t, r.GapMS, "a survivor sold after the kill: %+v", r.Answers)
	t.Logf("lock+guard, kill -9 of the holder (lease 2s): sales gap %.0f ms; answers %v", *r.GapMS, r.Answers)
	assert.Positive(t, r.Answers["unreachable"], "the killed instance's buyers lost their connection: %v", r.Answers)

	// The killed instance is started again: a new process at its index; the others unchanged.
	var after []int
	require.Eventually(t, func() bool {
		after, _ = labInstances(t, s)
		return after[k.Instance] != k.PID && s.call("GET", "/readyz", "", nil) == 200
	}, 30*time.Second, 50*time.Millisecond, "instance %d started again", k.Instance)
	for i := range before {
		if i != k.Instance {
			assert.Equal(t, before[i], after[i], "instance %d untouched", i)
		}
	}

	// A new lease: every instance is started again with it.
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	assert.Equal(t, 400, s.call("POST", "/api/lab/lease", `{"lease_ms":500}`, &e))
	assert.Contains(t, e.Error.Message, "lease_ms must be an integer from 1000 to 30000, got 500")
	var set struct {
		LeaseMS float64 `json:"lease_ms"`
	}
	require.Equal(t, 200, s.call("POST", "/api/lab/lease", `{"lease_ms":3000}`, &set))
	assert.Equal(t, 3000.0, set.LeaseMS)
	relaunched, lease := labInstances(t, s)
	assert.Equal(t, 3000.0, lease)
	for i := range after {
		assert.NotEqual(t, after[i], relaunched[i], "instance %d started again with the lease", i)
	}
	require.Equal(t, 200, s.call("GET", "/readyz", "", nil))

	// Other web pages act on nothing.
	for _, route := range []string{"/api/lab/kill", "/api/lab/lease", "/api/lab/takeover"} {
		req, err := http.NewRequest("POST", s.url+route, strings.NewReader(fmt.Sprintf(`{"item":%d,"lease_ms":10000}`, items[1])))
		require.NoError(t, err)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		assert.Equal(t, http.StatusForbidden, res.StatusCode, route)
	}
	still, lease := labInstances(t, s)
	assert.Equal(t, relaunched, still, "nothing killed or started again")
	assert.Equal(t, 3000.0, lease)

	// An instance that dies on its own within 5 s of its start is not started again (it
	// would be, forever): the supervisor gives up, with the reason.
	require.NoError(t, s.sup.SetLease(context.Background(), 2*time.Second))
	fresh, _ := labInstances(t, s)
	require.NoError(t, syscall.Kill(fresh[1], syscall.SIGKILL))
	require.Eventually(t, func() bool { return s.ctx.Err() != nil }, 10*time.Second, 10*time.Millisecond, "the supervisor gives up")
	assert.ErrorContains(t, context.Cause(s.ctx), "lab instance 1 exited")
	assert.ErrorContains(t, context.Cause(s.ctx), "(not restarted)")
}

// Without --instances the lab cannot kill a holder or change its lease (a process cannot
// start itself again): 409, in the one error shape, and nothing sold; the kill lesson's fields
// are checked first.
func TestLabKillNeedsInstances(t *testing.T) {
	e := newEnv(t, envOptions{lease: 2 * time.Second, lockWait: 2 * time.Second})
	id := resetLab(t, e)[0]
	for _, tt := range []struct{ path, body, code string }{
		{"/api/lab/kill", `{"item":` + id + `}`, "kill_unsupported"},
		{"/api/lab/lease", `{"lease_ms":10000}`, "lease_unsupported"},
		{"/api/lab/takeover", `{"items":[` + id + `,` + id + `1],"buyers":2,"work_ms":0,"quantity":1}`, "kill_unsupported"},
		{"/api/lab/run", `{"strategy":"lock+guard","buyers":2,"work_ms":0,"quantity":1,"item":` + id + `,"fault":"kill"}`, "kill_unsupported"},
	} {
		a := e.do("POST", tt.path, tt.body)
		assert.Equal(t, http.StatusConflict, a.status, "%s: %s", tt.path, a.body)
		assert.Equal(t, tt.code, a.errorCode(), "%s: %s", tt.path, a.body)
	}
	for _, tt := range []struct{ path, body, want string }{
		{"/api/lab/kill", `{"item":0}`, "item must be a positive item id, got 0"},
		{"/api/lab/lease", `{"lease_ms":60000}`, "lease_ms must be an integer from 1000 to 30000, got 60000"},
		{"/api/lab/takeover", `{"items":[` + id + `],"buyers":2,"work_ms":0,"quantity":1}`, "items must be two different item ids"},
		{"/api/lab/takeover", `{"items":[` + id + `,` + id + `],"buyers":2,"work_ms":0,"quantity":1}`, "items must be two different item ids"},
		{"/api/lab/takeover", `{"items":[` + id + `,` + id + `1],"buyers":0,"work_ms":0,"quantity":1}`, "buyers must be an integer from 1 to 200, got 0"},
	} {
		a := e.do("POST", tt.path, tt.body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s %s: %s", tt.path, tt.body, a.body)
		assert.Contains(t, string(a.body), tt.want, "%s %s", tt.path, tt.body)
	}
	var orders []any
	decode(t, e.do("GET", "/api/orders", ""), &orders)
	assert.Empty(t, orders, "nothing sold")
}
