package handlers_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/apicheck"
	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

const testToken = "test-admin-token"

// dbs are the database backends of the tests that run on both (envOptions.backend); the
// PostgreSQL server starts on first use.
var dbs = dbtest.NewSet("handlers.db")

// apiDoc checks every answer of every test server (newEnv) against the OpenAPI document.
var apiDoc = func() *apicheck.Checker {
	c, err := apicheck.New(handlers.OpenAPI())
	if err != nil {
		panic(err)
	}
	return c
}()

func TestMain(m *testing.M) {
	code := m.Run()
	dbs.Close()
	if testing.Verbose() {
		fmt.Printf("openapi: %d answers checked against the document\n", apiDoc.Checked())
	}
	os.Exit(code)
}

// testCatalogue is the catalogue every test server starts with: item 1 has 10 units, item 2
// has 1000000 (for the fuzz target), item 3 has 1.
var testCatalogue = []inventory.NewItem{
	{SKU: "T-1", Name: "ten", Stock: 10, PriceCents: 100},
	{SKU: "T-2", Name: "many", Stock: 1000000, PriceCents: 200},
	{SKU: "T-3", Name: "one", Stock: 1, PriceCents: 300},
}

// env is one storefront under test: a real service on a SQLite file, behind httptest, every
// answer on a route of the OpenAPI document checked against it (apiDoc).
type env struct {
	t       testing.TB
	svc     *inventory.Service
	wrap    *faultService // the Service the handlers see
	srv     *httptest.Server
	metrics *handlers.Metrics
	locks   *inventory.LockSet

	lockClient *locking.Client // nil without redis
}

// lockKeyPrefix is the prefix main gives the lock client.
const lockKeyPrefix = "stockguard:lock:"

type envOptions struct {
	demo            bool
	redis           *redistest.Server      // nil: no lock (the lock strategies answer unavailable)
	lockWait        time.Duration          // the lock client's Wait; 0 means its default
	defaultStrategy string                 // "" means guard without redis, lock+guard with it
	log             io.Writer              // the handlers' log; nil discards it
	lease           time.Duration          // the lock lease; 0 means the lock client's default
	configure       func(*handlers.Config) // when not nil, changes the handlers' configuration
	backend         *dbtest.Backend        // nil: a SQLite file
}

// newEnv starts a storefront; the default strategy is guard unless opts says otherwise.
func newEnv(t testing.TB, opts envOptions) *env {
	t.Helper()
	ctx := context.Background()
	var db *gorm.DB
	if opts.backend != nil {
		db, _ = opts.backend.Open(t)
	} else {
		var err error
		db, err = models.Open(ctx, filepath.Join(t.TempDir(), "test.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = models.Close(db) })
	}
	e := &env{t: t, locks: &inventory.LockSet{}, metrics: handlers.NewMetrics(prometheus.NewRegistry())}
	cfg := inventory.Config{DB: db, Default: inventory.StrategyGuard, Holds: e.metrics}
	hooks := locking.JoinHooks(inventory.ObserverHooks(e.metrics), e.locks.Hooks(lockKeyPrefix))
	if opts.redis != nil {
		rdb := opts.redis.Client(t)
		var callTimeout time.Duration
		if opts.lease > 0 {
			// A short lease means a short Redis call timeout (lease/10): on a loaded test
			// machine dialling alone can take longer. Dial the connections of a burst first,
			// and allow the longest call timeout the lease permits.
			callTimeout = opts.lease / 4
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() { _ = rdb.Ping(ctx).Err() })
			}
			wg.Wait()
		}
		e.lockClient = locking.New(rdb, &locking.Options{KeyPrefix: lockKeyPrefix, Wait: opts.lockWait,
			Lease: opts.lease, CallTimeout: callTimeout, Hooks: hooks})
		t.Cleanup(func() { _ = e.lockClient.Close() })
		cfg.Locker = inventory.NewLocker(e.lockClient)
		cfg.Checks = []inventory.Check{{Name: "redis " + opts.redis.Addr(), Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}}
		cfg.Default = inventory.StrategyLockGuard
	}
	if opts.demo {
		cfg.Extra = demoRows(t, opts) // none in the nodemo build
	}
	if opts.defaultStrategy != "" {
		cfg.Default = opts.defaultStrategy
	}
	opts.defaultStrategy = cfg.Default
	svc, err := inventory.NewService(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Close() })
	require.NoError(t, svc.Reset(ctx, testCatalogue))
	e.svc, e.wrap = svc, &faultService{Service: svc}
	hcfg := handlers.Config{
		Service:         e.wrap,
		AdminToken:      testToken,
		Demo:            opts.demo,
		DefaultStrategy: opts.defaultStrategy,
		Logger:          slog.New(slog.NewTextHandler(cmp.Or(opts.log, io.Discard), nil)),
		Metrics:         e.metrics,
		Debug:           e.locks,
	}
	if opts.configure != nil {
		opts.configure(&hcfg)
	}
	e.srv = httptest.NewServer(apicheck.Handler(t, apiDoc, handlers.New(hcfg)))
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
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(a.body, &b) != nil {
		return ""
	}
	return b.Error.Code
}

// do sends one request; body is sent as is (a string) and headers are "Name: value" pairs.
func (e *env) do(method, path, body string, headers ...string) answer {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	require.NoError(e.t, err)
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		require.True(e.t, ok, "header %q", h)
		req.Header.Add(name, strings.TrimSpace(value))
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.send(req)
}

func (e *env) send(req *http.Request) answer {
	e.t.Helper()
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

// faultService wraps the real service; a non-nil hook replaces the method it names.
type faultService struct {
	*inventory.Service
	purchase func(ctx context.Context, req inventory.PurchaseRequest) (inventory.Receipt, error)
	ready    func(ctx context.Context) error
	// listFails, once set, makes ListItems fail (set while the server runs: atomic).
	listFails atomic.Bool
}

func (f *faultService) ListItems(ctx context.Context) ([]inventory.Item, error) {
	if f.listFails.Load() {
		return nil, fmt.Errorf("%w: the database stopped answering", inventory.ErrUnavailable)
	}
	return f.Service.ListItems(ctx)
}

func (f *faultService) Purchase(ctx context.Context, req inventory.PurchaseRequest) (inventory.Receipt, error) {
	if f.purchase != nil {
		return f.purchase(ctx, req)
	}
	return f.Service.Purchase(ctx, req)
}

func (f *faultService) Readiness(ctx context.Context) ([]inventory.CheckResult, error) {
	if f.ready != nil {
		return nil, f.ready(ctx)
	}
	return f.Service.Readiness(ctx)
}

var _ handlers.Service = (*faultService)(nil)
