package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// TestTracesInJaeger runs a real Jaeger (v1.76.0's all-in-one, built from its Go sources in
// the nested module tools/jaeger: OTLP in, /api/traces out, in-memory storage) and two
// storefront processes that export to it, sharing a hot item on one redis-server and one
// SQLite file. It fires a burst of purchases of the hot item at both and a cart, then stalls
// one buyer before its write past its lease (the lab's stall: the holder stops, as in a
// pause, while another process takes the lock and writes), and reads the traces back over
// Jaeger's HTTP API:
//   - one trace per request, whose id the request's log lines carry (trace_id);
//   - each buyer's request span carries its item and outcome, and links to the lock.hold that
//     served it; a coalesced hold links to every buyer it served (more than one, somewhere);
//   - the Redis and SQL spans of a hold are under it (hold.write's statements under hold.write);
//   - the stalled write refused by the fence is a fence.refused event with both tokens.
func TestTracesInJaeger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Jaeger (cached) and the storefront, runs both")
	}
	jaeger := startJaeger(t, jaegerBinary(t))
	bin := buildBinary(t)
	rdb := redistest.Start(t)
	db := filepath.Join(t.TempDir(), "traces.db")
	services := []string{"stockguard-a", "stockguard-b"}
	var fronts [2]*server
	for i := range fronts {
		fronts[i] = startBinaryEnv(t, bin, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp,
			"OTEL_SERVICE_NAME":           services[i],
			"OTEL_TRACES_SAMPLER":         "always_on",
		}, "--addr", "127.0.0.1:0", "--db", db, "--demo", "--admin-token", "traces-token",
			"--redis", "redis://"+rdb.Addr()+"/0", "--lock-lease", "1s", "--lock-wait", "10s",
			"--log-level", "info", "--shutdown-timeout", "10s")
	}
	var items []item
	reset := `{"items":[{"sku":"H","name":"hot","stock":1000,"price_cents":1},{"sku":"C","name":"cold","stock":1000,"price_cents":1}]}`
	require.Equal(t, http.StatusOK, fronts[0].call("POST", "/api/admin/reset", reset, &items, "Authorization: Bearer traces-token"))
	hot, cold := items[0].ID, items[1].ID

	// The burst: 12 buyers of the hot item at each storefront at once, each with 30ms of
	// work (so that holds coalesce), and one cart of both items.
	type sent struct {
		front  int
		id     string // X-Request-ID: the request's log lines carry it and its trace_id
		path   string
		status int
	}
	var (
		mu   sync.Mutex
		reqs []sent
		wg   sync.WaitGroup
	)
	n := 0
	do := func(front int, path, body string, headers ...string) sent {
		mu.Lock()
		n++
		id := fmt.Sprintf("traces-%d-%d", front, n)
		mu.Unlock()
		status := fronts[front].call("POST", path, body, nil, append(headers, "X-Request-ID: "+id,
			"Content-Type: application/json", "X-Strategy: lock+guard")...)
		r := sent{front: front, id: id, path: path, status: status}
		mu.Lock()
		reqs = append(reqs, r)
		mu.Unlock()
		return r
	}
	purchase := fmt.Sprintf("/api/items/%d/purchase", hot)
	for front := range fronts {
		for range 12 {
			wg.Go(func() { do(front, purchase, `{"quantity":1}`, "X-Simulated-Work: 30ms") })
		}
	}
	wg.Go(func() {
		do(0, "/api/checkout", fmt.Sprintf(`{"lines":[{"item_id":%d,"quantity":1},{"item_id":%d,"quantity":1}]}`, hot, cold),
			"X-Simulated-Work: 30ms")
	})
	wg.Wait()
	for _, r := range reqs {
		require.Equal(t, http.StatusCreated, r.status, "%s at storefront %d", r.path, r.front)
	}

	// The pause: the stalled buyer stops before its write for three leases; meanwhile its
	// lease runs out and a buyer at the other storefront takes the lock and writes.
	stalled := make(chan sent, 1)
	go func() { stalled <- do(0, purchase, `{"quantity":1}`, "X-Fault: stall") }() // owner: the test, which receives it
	time.Sleep(1500 * time.Millisecond)                                            // past the 1s lease
	other := do(1, purchase, `{"quantity":1}`)
	stallReq := <-stalled
	require.Equal(t, http.StatusCreated, other.status, "the other storefront's buyer sells during the stall")
	require.Equal(t, http.StatusCreated, stallReq.status, "the stalled buyer's retry sells")

	// Each request's trace id, from its log lines (the access log line carries trace_id). A
	// storefront writes that line as it answers, and the test reads its output through a pipe:
	// the last answer can arrive before its line does, so the lines are read until all are in.
	traceOf := map[string]string{} // request id -> trace id
	traceRE := regexp.MustCompile(`request_id=(\S+).*\btrace_id=([0-9a-f]{32})`)
	allLogged := func() bool {
		for _, f := range fronts {
			for _, line := range strings.Split(f.logs.String(), "\n") {
				if m := traceRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "msg=request ") {
					traceOf[m[1]] = m[2]
				}
			}
		}
		for _, r := range reqs {
			if traceOf[r.id] == "" {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !allLogged() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	distinct := map[string]bool{}
	for _, r := range reqs {
		tid := traceOf[r.id]
		require.NotEmpty(t, tid, "the access log line of %s carries its trace_id", r.id)
		assert.False(t, distinct[tid], "one trace per request: %s shares %s", r.id, tid)
		distinct[tid] = true
	}

	// Every request's trace in Jaeger: one server span, the request's, with its item and outcome.
	spanOf := map[string]jspan{} // request id -> its request span
	for _, r := range reqs {
		tr := jaeger.trace(t, traceOf[r.id], func(tr jtrace) bool { return len(tr.serverSpans()) == 1 })
		servers := tr.serverSpans()
		require.Len(t, servers, 1, "request %s: one request span in its trace", r.id)
		sp := servers[0]
		spanOf[r.id] = sp
		assert.Equal(t, "ordered", sp.tag(string(inventory.AttrOutcome)), "request %s", r.id)
		if r.path == purchase {
			assert.Equal(t, fmt.Sprint(hot), sp.tag(string(inventory.AttrItem)), "request %s", r.id)
		}
	}

	// The holds: each buyer links to the lock.hold that served it; that hold links back, and
	// has its Redis and SQL spans under it.
	holds := map[string]jtrace{} // trace id -> a hold's trace
	maxServed := 0
	for _, r := range reqs {
		sp := spanOf[r.id]
		if r.id == stallReq.id {
			continue // its own hold (an interceptor's purchase is not coalesced): below
		}
		links := sp.follows()
		require.Len(t, links, 1, "request %s links to the hold that served it", r.id)
		ht, ok := holds[links[0].TraceID]
		if !ok {
			ht = jaeger.trace(t, links[0].TraceID, func(tr jtrace) bool {
				return tr.byName(inventory.SpanLockHold) != nil && tr.byName(inventory.SpanHoldWrite) != nil
			})
			holds[links[0].TraceID] = ht
		}
		hold := ht.span(links[0].SpanID)
		require.NotNil(t, hold, "request %s: the linked hold span is in its trace", r.id)
		assert.Equal(t, inventory.SpanLockHold, hold.OperationName)
		served := hold.follows()
		assert.Contains(t, served, jref{RefType: "FOLLOWS_FROM", TraceID: traceOf[r.id], SpanID: sp.SpanID},
			"the hold links back to request %s", r.id)
		maxServed = max(maxServed, len(served))
	}
	assert.Greater(t, maxServed, 1, "a coalesced hold served several buyers, and links to each")
	for tid, ht := range holds {
		root := ht.byName(inventory.SpanLockHold)
		require.NotNil(t, root, "hold trace %s", tid)
		assert.Empty(t, root.parent(), "the hold is its trace's root")
		var redisUnder, sqlUnder, sqlUnderWrite bool
		for _, sp := range ht.Spans {
			switch {
			case sp.tag("db.system") == "redis" || sp.tag("db.system.name") == "redis":
				redisUnder = redisUnder || ht.under(sp, root.SpanID)
			case strings.HasPrefix(sp.OperationName, "sql."):
				sqlUnder = sqlUnder || ht.under(sp, root.SpanID)
				if w := ht.byName(inventory.SpanHoldWrite); w != nil && ht.under(sp, w.SpanID) {
					sqlUnderWrite = true
				}
			}
		}
		assert.True(t, redisUnder, "hold trace %s: Redis spans under the hold", tid)
		assert.True(t, sqlUnder, "hold trace %s: SQL spans under the hold", tid)
		assert.True(t, sqlUnderWrite, "hold trace %s: the write's statements under hold.write", tid)
	}

	// The fence: the stalled buyer's first write was refused as stale, an event with both
	// tokens on its request span; its retry sold.
	st := jaeger.trace(t, traceOf[stallReq.id], func(tr jtrace) bool { return tr.event(inventory.SpanEventFenceRefused) != nil })
	ev := st.event(inventory.SpanEventFenceRefused)
	require.NotNil(t, ev, "the stalled buyer's trace has the fence refusal")
	token, seen := ev.field(string(inventory.AttrToken)), ev.field(string(inventory.AttrSeen))
	require.NotEmpty(t, token)
	require.NotEmpty(t, seen)
	var tk, sn int64
	_, _ = fmt.Sscan(token, &tk)
	_, _ = fmt.Sscan(seen, &sn)
	assert.Less(t, tk, sn, "the refused token is older than the one the database had seen")
	t.Logf("%d requests, %d traces; %d coalesced holds, the largest served %d buyers; fence refused token %d (seen %d)",
		len(reqs), len(distinct), len(holds), maxServed, tk, sn)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the storefront exports its spans over OTLP/HTTP (to a
// loopback receiver here) and its request log lines carry the trace and span ids; without it,
// nothing is exported and no line carries them (tracing is off, nothing installed).
func TestTracingOnlyWhenAsked(t *testing.T) {
	var posts atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				posts.Add(1)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	for _, on := range []bool{false, true} {
		env := map[string]string{}
		if on {
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] = recv.URL
		}
		s := startServer(t, env, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "t.db"), "--log-level", "info",
			"--admin-token", "t", "--shutdown-timeout", "10s")
		assert.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil, "X-Request-ID: traced-buy"))
		require.Equal(t, 0, s.shutdown(), "a clean shutdown flushes the spans")
		line := ""
		for _, l := range strings.Split(s.logs.String(), "\n") {
			if strings.Contains(l, "msg=request ") && strings.Contains(l, "request_id=traced-buy") {
				line = l
			}
		}
		require.NotEmpty(t, line, "the access log line")
		if !on {
			assert.NotContains(t, line, "trace_id=")
			assert.NotContains(t, s.logs.String(), "msg=tracing")
			assert.Zero(t, posts.Load(), "nothing exported with tracing off")
			continue
		}
		assert.Regexp(t, `trace_id=[0-9a-f]{32} span_id=[0-9a-f]{16}`, line)
		assert.Contains(t, s.logs.String(), "msg=tracing service=stockguard")
		assert.Positive(t, posts.Load(), "spans exported over OTLP/HTTP by the shutdown")
	}
}

// jaegerBinary returns Jaeger's all-in-one built from the nested module tools/jaeger (its own
// go.mod: the collector's dependency graph stays out of the storefront's). The binary is kept
// in the user's cache directory under the hash of that module's go.sum, so it is built once
// per version; a cold build compiles the whole collector (docs/operations.md, "Tracing").
func jaegerBinary(t *testing.T) string {
	t.Helper()
	sum, err := os.ReadFile(filepath.Join("tools", "jaeger", "go.sum"))
	require.NoError(t, err)
	h := sha256.Sum256(sum)
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	bin := filepath.Join(cache, "stockguard", "jaeger-"+hex.EncodeToString(h[:6]))
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if os.Getenv("STOCKGUARD_JAEGER_BUILD") == "" {
		// A cold build of Jaeger takes 10 minutes or more on 2 cores (docs/operations.md#tracing):
		// more than make test's whole budget. It is built once, on request, and kept.
		t.Skipf("no cached Jaeger build at %s: run `make jaeger` once (a cold build takes 10 min or more on 2 cores), "+
			"or set STOCKGUARD_JAEGER_BUILD=1, and this test runs", bin)
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	tmp := bin + ".building-" + fmt.Sprint(os.Getpid())
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", tmp, "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = filepath.Join("tools", "jaeger")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build jaeger: %s", out)
	require.NoError(t, os.Rename(tmp, bin))
	t.Logf("built Jaeger in %s (kept as %s)", time.Since(start).Round(time.Second), bin)
	return bin
}

// jaegerProc is a running Jaeger: its OTLP/HTTP endpoint and its query API.
type jaegerProc struct {
	otlp  string // http://127.0.0.1:port, for OTEL_EXPORTER_OTLP_ENDPOINT
	query string // http://127.0.0.1:port: /api/traces
}

// jaegerConfig is the all-in-one's configuration on loopback ports: OTLP over HTTP in, the
// in-memory store, the query service; no other receiver or extension listens.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// startJaeger starts bin on free loopback ports and waits for its query API; it is stopped
// when t ends.
func startJaeger(t *testing.T, bin string) *jaegerProc {
	t.Helper()
	var ports [3]int
	for i := range ports {
		p, err := procutil.FreePort()
		require.NoError(t, err)
		ports[i] = p
	}
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2]), 0o644))
	cmd := exec.Command(bin, "--config", cfg)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // owner: the cleanup, which waits for exited
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("jaeger log:\n%s", logs.String())
		}
	})
	j := &jaegerProc{otlp: fmt.Sprintf("http://127.0.0.1:%d", ports[2]), query: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		res, err := http.Get(j.query + "/api/services")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "jaeger's query API answers")
	select {
	case <-exited:
		t.Fatalf("jaeger exited:\n%s", logs.String())
	default:
	}
	return j
}

// syncBuffer is a bytes buffer safe for a child's two output streams and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// trace returns trace id as Jaeger's /api/traces/{id} answers it, once complete says it is
// (spans arrive in batches, from two processes).
func (j *jaegerProc) trace(t *testing.T, id string, complete func(jtrace) bool) jtrace {
	t.Helper()
	var last jtrace
	require.Eventually(t, func() bool {
		res, err := http.Get(j.query + "/api/traces/" + url.PathEscape(id))
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var body struct {
			Data []jtrace `json:"data"`
		}
		if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&body) != nil || len(body.Data) != 1 {
			return false
		}
		last = body.Data[0]
		return complete(last)
	}, 30*time.Second, 200*time.Millisecond, "trace %s in jaeger (last seen: %d spans)", id, len(last.Spans))
	return last
}

// jtrace, jspan, jref, jkv and jlog are the parts of Jaeger's JSON (its query API's model) the
// test reads.
type jtrace struct {
	TraceID string  `json:"traceID"`
	Spans   []jspan `json:"spans"`
}

type jspan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []jref `json:"references"`
	Tags          []jkv  `json:"tags"`
	Logs          []jlog `json:"logs"`
}

type jref struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

type jkv struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

type jlog struct {
	Fields []jkv `json:"fields"`
}

func (s jspan) tag(key string) string {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

// parent is the span's CHILD_OF reference's span id ("" for a root).
func (s jspan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// follows are the span's links (FOLLOWS_FROM references).
func (s jspan) follows() []jref {
	var out []jref
	for _, r := range s.References {
		if r.RefType == "FOLLOWS_FROM" {
			out = append(out, r)
		}
	}
	return out
}

func (l jlog) field(key string) string {
	for _, kv := range l.Fields {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

// serverSpans are the trace's request spans (otelgin's: span.kind server).
func (tr jtrace) serverSpans() []jspan {
	var out []jspan
	for _, s := range tr.Spans {
		if s.tag("span.kind") == "server" {
			out = append(out, s)
		}
	}
	return out
}

func (tr jtrace) span(id string) *jspan {
	for i := range tr.Spans {
		if tr.Spans[i].SpanID == id {
			return &tr.Spans[i]
		}
	}
	return nil
}

func (tr jtrace) byName(name string) *jspan {
	for i := range tr.Spans {
		if tr.Spans[i].OperationName == name {
			return &tr.Spans[i]
		}
	}
	return nil
}

// under reports whether s descends from the span ancestor (by CHILD_OF references).
func (tr jtrace) under(s jspan, ancestor string) bool {
	for p := s.parent(); p != ""; {
		if p == ancestor {
			return true
		}
		ps := tr.span(p)
		if ps == nil {
			return false
		}
		p = ps.parent()
	}
	return false
}

// event returns the first span event (log) named name in the trace.
func (tr jtrace) event(name string) *jlog {
	for _, s := range tr.Spans {
		for i, l := range s.Logs {
			if l.field("event") == name {
				return &s.Logs[i]
			}
		}
	}
	return nil
}
