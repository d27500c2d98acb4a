//go:build !nodemo

package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/lab"
)

// stream is one open GET /api/events.
type stream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func openStream(t *testing.T, url string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return &stream{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next event of kind (skipping others), failing t if the stream ends.
func (s *stream) next(t *testing.T, kind string) lab.Event {
	t.Helper()
	for s.sc.Scan() {
		line, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev lab.Event
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		if ev.Kind == kind {
			return ev
		}
	}
	t.Fatalf("the stream ended before a %q event: %v", kind, s.sc.Err())
	return lab.Event{}
}

// resetLab loads the lab catalogue and returns its items' ids.
func resetLab(t *testing.T, e *env) []string {
	t.Helper()
	var items []struct {
		ID    int64 `json:"id"`
		Stock int   `json:"stock"`
	}
	a := e.do("POST", "/api/lab/reset", "{}")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	decode(t, a, &items)
	require.Len(t, items, 3)
	ids := make([]string, len(items))
	for i, it := range items {
		assert.Equal(t, 10, it.Stock)
		ids[i] = strconv.FormatInt(it.ID, 10)
	}
	return ids
}

// A stream outlives the server's WriteTimeout: it clears its write deadline.
func TestEventsStreamOutlivesWriteTimeout(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second, writeTimeout: 200 * time.Millisecond})
	id := resetLab(t, e)[0]
	s := openStream(t, e.srv.URL)
	hello := s.next(t, lab.EventHello)
	assert.Positive(t, hello.PID)
	time.Sleep(600 * time.Millisecond) // three write timeouts
	a := e.do("POST", "/api/items/"+id+"/purchase", `{"quantity":10}`)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	ev := s.next(t, inventory.EventOrder)
	assert.Equal(t, id, strconv.FormatInt(ev.Item, 10))
	require.NotNil(t, ev.Remaining)
	assert.Equal(t, 0, *ev.Remaining)
	assert.Equal(t, hello.PID, ev.PID)
	assert.Greater(t, ev.Seq, hello.Seq)
	assert.Equal(t, inventory.EventSoldOut, func() string {
		e.do("POST", "/api/items/"+id+"/purchase", `{"quantity":1}`)
		return s.next(t, inventory.EventSoldOut).Kind
	}())
}

func TestEventsStreamEndsOnClose(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second})
	s := openStream(t, e.srv.URL)
	s.next(t, lab.EventHello)
	e.events.Close()
	for s.sc.Scan() {
	}
	assert.Equal(t, "unavailable", e.do("GET", "/api/events", "").errorCode(), "no new stream after Close")
}

// labRun posts one lab run and decodes the answer.
func labRun(t *testing.T, e *env, body string) map[string]any {
	t.Helper()
	a := e.do("POST", "/api/lab/run", body)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var res map[string]any
	decode(t, a, &res)
	return res
}

// The lab of one demo process: its page, reset, naive oversells, lock+guard is safe, the
// stall fault makes lock+guard's fence refuse, and pausing needs --instances.
func TestLabSingleProcess(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second})
	page := e.do("GET", "/", "")
	assert.Contains(t, string(page.body), "lock lab")
	for _, file := range []string{"/static/lab.js", "/static/style.css"} {
		assert.Equal(t, http.StatusOK, e.do("GET", file, "").status, file)
	}

	var info struct {
		Instances []lab.Instance `json:"instances"`
		LeaseMS   float64        `json:"lease_ms"`
		Pause     bool           `json:"pause"`
		PauseNote string         `json:"pause_note"`
	}
	decode(t, e.do("GET", "/api/lab", ""), &info)
	require.Len(t, info.Instances, 1)
	assert.Equal(t, "", info.Instances[0].Base)
	assert.EqualValues(t, 1000, info.LeaseMS)
	assert.False(t, info.Pause)
	assert.Contains(t, info.PauseNote, "--instances")

	ids := resetLab(t, e)
	id := func(i int) string { return ids[i] }

	res := labRun(t, e, `{"strategy":"naive","buyers":20,"work_ms":50,"quantity":1,"item":`+id(0)+`,"fault":""}`)
	assert.Equal(t, "OVERSOLD", res["verdict"], "%v", res)
	assert.Positive(t, res["oversold"])

	res = labRun(t, e, `{"strategy":"lock+guard","buyers":20,"work_ms":5,"quantity":1,"item":`+id(1)+`,"fault":""}`)
	assert.Equal(t, "SAFE", res["verdict"], "%v", res)
	assert.EqualValues(t, 10, res["sold"], "%v", res)

	s := openStream(t, e.srv.URL)
	res = labRun(t, e, `{"strategy":"lock+guard","buyers":4,"work_ms":10,"quantity":1,"item":`+id(2)+`,"fault":"stall"}`)
	assert.Equal(t, "SAFE", res["verdict"], "%v", res)
	stall := s.next(t, lab.EventStall)
	assert.EqualValues(t, 3000, stall.StallMS, "three leases")
	assert.Equal(t, "lock+guard", stall.Strategy)
	refused := s.next(t, inventory.EventFenceRefused)
	assert.Greater(t, refused.Seen, refused.Token)

	a := e.do("POST", "/api/lab/pause", `{"item":`+id(0)+`}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, "pause_unsupported", a.errorCode())
	a = e.do("POST", "/api/lab/run", `{"strategy":"naive","buyers":0,"work_ms":0,"quantity":1,"item":1,"fault":""}`)
	assert.Equal(t, "invalid_request", a.errorCode())
	a = e.do("POST", "/api/lab/run", `{"strategy":"yolo","buyers":2,"work_ms":0,"quantity":1,"item":`+id(0)+`,"fault":""}`)
	assert.Equal(t, "invalid_request", a.errorCode(), "%s", a.body)
	a = e.do("POST", "/api/lab/run", `{"strategy":"naive","buyers":2,"work_ms":0,"quantity":1,"item":999,"fault":""}`)
	assert.Equal(t, "not_found", a.errorCode(), "%s", a.body)
}

// The lab offers the demo strategies (it lists GET /api/strategies) and runs them: the
// flash-sale pattern with the guard sells exactly the stock, fixed-lease with work past its
// lease oversells, and the crash fault (setnx-expire only) blocks the item until the lab's
// reset deletes the key left without a TTL.
func TestLabRunsTheDemoStrategies(t *testing.T) {
	e := newEnv(t, envOptions{lease: 300 * time.Millisecond, lockWait: 2 * time.Second})
	rows := demoOnly(t, e)
	for _, name := range []string{inventory.StrategySetnxExpire, inventory.StrategyDelRelease, inventory.StrategyFixedLease,
		inventory.StrategyOptimistic, inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyWatch} {
		assert.True(t, rows[name], "the lab's list offers %s", name)
	}
	var ids []string
	reset := func() { ids = resetLab(t, e) }
	reset()
	id := func(i int) string { return ids[i] }

	res := labRun(t, e, `{"strategy":"redis-stock+guard","buyers":14,"work_ms":5,"quantity":1,"item":`+id(0)+`,"fault":""}`)
	assert.Equal(t, "SAFE", res["verdict"], "%v", res)
	assert.EqualValues(t, 10, res["sold"], "%v", res)
	res = labRun(t, e, `{"strategy":"optimistic","buyers":12,"work_ms":5,"quantity":1,"item":`+id(1)+`,"fault":""}`)
	assert.Equal(t, "SAFE", res["verdict"], "%v", res)
	// 20 buyers of 10 units, each working twice the fixed lease: holders overlap.
	res = labRun(t, e, `{"strategy":"fixed-lease","buyers":20,"work_ms":600,"quantity":1,"item":`+id(2)+`,"fault":""}`)
	assert.NotEqual(t, "SAFE", res["verdict"], "%v", res)

	a := e.do("POST", "/api/lab/run", `{"strategy":"lock","buyers":2,"work_ms":0,"quantity":1,"item":`+id(0)+`,"fault":"crash"}`)
	assert.Equal(t, "invalid_request", a.errorCode(), "%s", a.body)
	reset()
	res = labRun(t, e, `{"strategy":"setnx-expire","buyers":4,"work_ms":0,"quantity":1,"item":`+id(0)+`,"fault":"crash"}`)
	assert.Equal(t, "BLOCKED", res["verdict"], "%v", res)
	assert.EqualValues(t, 0, res["sold"], "%v", res)
	assert.Contains(t, res["note"], "no TTL")
	reset()
	res = labRun(t, e, `{"strategy":"setnx-expire","buyers":4,"work_ms":0,"quantity":1,"item":`+id(0)+`,"fault":""}`)
	assert.Equal(t, "SAFE", res["verdict"], "after the reset the item sells: %v", res)
	assert.EqualValues(t, 4, res["sold"], "%v", res)
}

// X-Fault is the lab's: crash applies to setnx-expire only, and any other value is refused.
func TestFaultHeader(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second})
	id := resetLab(t, e)[0]
	buy := "/api/items/" + id + "/purchase"
	a := e.do(http.MethodPost, buy, `{"quantity":1}`, "X-Fault: crash", "X-Strategy: guard")
	assert.Equal(t, "invalid_request", a.errorCode(), "%s", a.body)
	a = e.do(http.MethodPost, buy, `{"quantity":1}`, "X-Fault: later", "X-Strategy: setnx-expire")
	assert.Equal(t, "invalid_request", a.errorCode(), "%s", a.body)
	a = e.do(http.MethodPost, buy, `{"quantity":1}`, "X-Fault: stall", "X-Fault: stall")
	assert.Equal(t, "invalid_request", a.errorCode(), "one value: %s", a.body)
	a = e.do(http.MethodPost, buy, `{"quantity":1}`, "X-Strategy: setnx-expire")
	assert.Equal(t, http.StatusCreated, a.status, "%s", a.body)
}
