//go:build !nodemo

package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
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

// Open event streams are capped per process, and each one's buffer is small: 300 attempts
// cost well under 64 MB, those past the cap are refused with 429 overloaded, and a stream
// closed frees its place.
func TestEventsStreamsCapped(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var open []*http.Response
	refused := 0
	for range 300 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/api/events", nil)
		require.NoError(t, err)
		res, err := hc.Do(req)
		require.NoError(t, err)
		if res.StatusCode == http.StatusOK {
			open = append(open, res)
			continue
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "%s", b)
		assert.Equal(t, "overloaded", answer{body: b}.errorCode(), "%s", b)
		refused++
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("300 stream attempts: %d open, %d refused, heap grew %.1f MB", len(open), refused, float64(grown)/(1<<20))
	assert.Less(t, grown, int64(64<<20), "300 event streams cost at most 64 MB")
	assert.Positive(t, refused, "streams past the cap are refused")
	assert.LessOrEqual(t, len(open), 64)

	_ = open[0].Body.Close() // a place frees up once the server sees the stream gone
	require.Eventually(t, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/api/events", nil)
		res, err := hc.Do(req)
		if err != nil {
			return false
		}
		open[0] = res
		return res.StatusCode == http.StatusOK
	}, 5*time.Second, 50*time.Millisecond)
	for _, res := range open {
		_ = res.Body.Close()
	}
}

// Every number of a lab run is checked against its range before anything is sold: 400
// invalid_request naming the field and its bounds, one "invalid request: " prefix, and the
// stock untouched; pause answers the same code for the same fault.
func TestLabRunRejectsOutOfRange(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second})
	id := resetLab(t, e)[0]
	stock := func() string { return string(e.do("GET", "/api/items/"+id, "").body) }
	was := stock()
	for _, tt := range []struct{ body, want string }{
		{`{"strategy":"naive","buyers":5,"work_ms":288230376151711744,"quantity":1,"item":` + id + `}`, "work_ms must be an integer from 0 to 1000"},
		{`{"strategy":"naive","buyers":5,"work_ms":9223372036854775807,"quantity":1,"item":` + id + `}`, "work_ms must be an integer from 0 to 1000"},
		{`{"strategy":"naive","buyers":5,"work_ms":-1,"quantity":1,"item":` + id + `}`, "work_ms must be an integer from 0 to 1000, got -1"},
		{`{"strategy":"naive","buyers":201,"work_ms":0,"quantity":1,"item":` + id + `}`, "buyers must be an integer from 1 to 200, got 201"},
		{`{"strategy":"naive","buyers":5,"work_ms":0,"quantity":0,"item":` + id + `}`, "quantity must be an integer from 1 to 1000, got 0"},
		{`{"strategy":"naive","buyers":5,"work_ms":0,"quantity":1001,"item":` + id + `}`, "quantity must be an integer from 1 to 1000"},
		{`{"strategy":"naive","buyers":5,"work_ms":0,"quantity":1,"item":-1}`, "item must be a positive item id, got -1"},
		{`{"strategy":"naive","buyers":5,"work_ms":0,"quantity":1,"item":0}`, "item must be a positive item id, got 0"},
		{`{"strategy":"yolo","buyers":2,"work_ms":0,"quantity":1,"item":` + id + `}`, "yolo"},
	} {
		a := e.do("POST", "/api/lab/run", tt.body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", tt.body, a.body)
		assert.Equal(t, "invalid_request", a.errorCode(), "%s", a.body)
		var b struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		decode(t, a, &b)
		assert.Contains(t, b.Error.Message, tt.want)
		assert.Equal(t, 1, strings.Count(b.Error.Message, "invalid request"), "one prefix: %s", b.Error.Message)
	}
	assert.Equal(t, was, stock(), "nothing sold")
	a := e.do("POST", "/api/lab/pause", `{"item":-1}`)
	assert.Equal(t, http.StatusBadRequest, a.status)
	assert.Contains(t, string(a.body), "item must be a positive item id, got -1")
}

// A demo on loopback asks no token, so its routes that act answer only its own page and this
// machine's tools: a reset or a burst sent by another web page the user visits (its Origin or
// Sec-Fetch-Site says so) is refused 403 forbidden, and so is a request under another site's
// name that resolves to loopback (DNS rebinding); the orders stay.
func TestLabRefusesOtherPages(t *testing.T) {
	e := newEnv(t, envOptions{lease: time.Second})
	id := resetLab(t, e)[0]
	labRun(t, e, `{"strategy":"lock+guard","buyers":3,"work_ms":0,"quantity":1,"item":`+id+`,"fault":""}`)
	orders := func() string { return string(e.do("GET", "/api/orders", "").body) }
	before := orders()
	require.Contains(t, before, `"order_id"`, "the run sold")
	for _, h := range [][]string{
		{"Origin: https://evil.example", "Content-Type: text/plain"},
		{"Sec-Fetch-Site: cross-site"},
	} {
		a := e.do("POST", "/api/lab/reset", "", h...)
		assert.Equal(t, http.StatusForbidden, a.status, "%v: %s", h, a.body)
		assert.Contains(t, string(a.body), `"forbidden"`)
		a = e.do("POST", "/api/lab/run", `{"strategy":"naive","buyers":3,"work_ms":0,"quantity":1,"item":`+id+`,"fault":""}`, h...)
		assert.Equal(t, http.StatusForbidden, a.status, "%v: %s", h, a.body)
	}
	req, err := http.NewRequest("POST", e.srv.URL+"/api/lab/reset", nil)
	require.NoError(t, err)
	req.Host = "attacker.example" // DNS rebinding: another site's name, resolved to loopback
	res, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode, "a reset under another site's name")
	assert.Equal(t, before, orders(), "nothing was reset or sold")
}
