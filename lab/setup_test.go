//go:build !nodemo

package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/lab"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

// env is one --demo storefront process with the lab, wired as the command wires it, on a
// SQLite file and a real redis-server, behind httptest.
type env struct {
	t      testing.TB
	srv    *httptest.Server
	events *lab.Events
}

type envOptions struct {
	lease, lockWait time.Duration // the item locks' lease and wait
	writeTimeout    time.Duration // the HTTP server's WriteTimeout; 0: none
	requireToken    bool          // the lab's mutating routes take the admin token (adminToken)
}

// adminToken is the admin token of an env.
const adminToken = "lab-env-token"

func newEnv(t testing.TB, opts envOptions) *env {
	t.Helper()
	ctx := context.Background()
	db, err := models.Open(ctx, filepath.Join(t.TempDir(), "lab.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = models.Close(db) })
	rdb := redistest.Start(t).Client(t)
	// A short lease means a short Redis call timeout (lease/10): on a loaded test machine
	// dialling alone can take longer. Dial the connections of a burst first, and allow the
	// longest call timeout the lease permits.
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { _ = rdb.Ping(ctx).Err() })
	}
	wg.Wait()

	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	sf := lab.NewStorefront(sctx, lab.StorefrontConfig{Redis: rdb, Lease: opts.lease, LockWait: opts.lockWait, StallFor: 3 * opts.lease, Strategy: inventory.StrategyLockGuard, RequireToken: opts.requireToken})
	t.Cleanup(func() { _ = sf.Close() })
	held := &inventory.LockSet{} // /api/debug/locks, as the command wires it
	lockOpts := &locking.Options{KeyPrefix: inventory.LockKeyPrefix, Lease: opts.lease, Wait: opts.lockWait,
		CallTimeout: opts.lease / 4, Hooks: locking.JoinHooks(sf.LockHooks(), held.Hooks(inventory.LockKeyPrefix))}
	lc := locking.New(rdb, lockOpts)
	t.Cleanup(func() { _ = lc.Close() })
	icfg := inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Default: inventory.StrategyLockGuard}
	stallOpts := *lockOpts // the stall fault's client: hooks of its own, as the command wires it
	stallOpts.Hooks = locking.JoinHooks(sf.LockHooks(), held.Hooks(inventory.LockKeyPrefix))
	sf.Inventory(&icfg, &stallOpts)
	svc, err := inventory.NewService(icfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Close() })
	hcfg := handlers.Config{Service: svc, Demo: true, DefaultStrategy: inventory.StrategyLockGuard, Debug: held, AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sf.Handlers(&hcfg, svc)
	e := &env{t: t, events: sf.Events(), srv: httptest.NewUnstartedServer(handlers.New(hcfg))}
	e.srv.Config.WriteTimeout = opts.writeTimeout
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

// answer is one HTTP answer, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code of an error answer ("" if the body is not the error shape).
func (a answer) errorCode() string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(a.body, &b) != nil {
		return ""
	}
	return b.Error.Code
}

// do sends one request; headers are "Name: value" pairs.
func (e *env) do(method, path, body string, headers ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(e.t, err)
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		require.True(e.t, ok, "header %q", h)
		req.Header.Add(name, strings.TrimSpace(value))
	}
	res, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return answer{status: res.StatusCode, header: res.Header, body: b}
}

// decode unmarshals an answer's body into v.
func decode(t testing.TB, a answer, v any) {
	t.Helper()
	require.NoError(t, json.NewDecoder(bytes.NewReader(a.body)).Decode(v), "body %s", a.body)
}

// demoOnly returns GET /api/strategies' demo_only by strategy name.
func demoOnly(t *testing.T, e *env) map[string]bool {
	t.Helper()
	var rows []struct {
		Name     string `json:"name"`
		DemoOnly bool   `json:"demo_only"`
	}
	decode(t, e.do(http.MethodGet, "/api/strategies", ""), &rows)
	m := map[string]bool{}
	for _, r := range rows {
		m[r.Name] = r.DemoOnly
	}
	return m
}
