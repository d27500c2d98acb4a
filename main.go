// Command stockguard serves the storefront: an HTTP API (Gin) over the inventory service,
// whose purchases are protected by Redis locks with fencing tokens and a database guard.
//
// With no flags it serves on :8080 with a SQLite file and a Redis it starts itself (a
// redis-server child process, or an in-process Redis when redis-server is not installed).
// Run `stockguard -h` for the flags and their environment variables.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/tracing"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the first signal starts the graceful shutdown; a second one kills at once
	}()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: it parses args (with getenv as the environment), serves until ctx
// ends, shuts down gracefully and returns the exit code: 0 after a clean shutdown, 1 on a
// failure, 2 on a configuration error. Logs go to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "stockguard:", err)
		return 2
	}
	logger := newLogger(stderr, cfg.logLevel)
	redis.SetLogger(redisLogger{logger}) // go-redis's own lines (a refused dial while a Redis boots): debug
	if cfg.demo && !cfg.dbGiven {
		// The demo's data stays apart from the storefront's stockguard.db: a fresh file, gone at exit.
		dir, err := os.MkdirTemp("", "stockguard-demo-")
		if err != nil {
			logger.Error("stockguard failed", "err", err)
			return 1
		}
		defer os.RemoveAll(dir)
		cfg.db = filepath.Join(dir, "demo.db")
		notice(logger, "demo database: a fresh SQLite file, deleted at exit (--db keeps one)", "path", cfg.db)
	}
	cfg.labLink = cfg.demo && getenv(labInstanceEnv) == ""
	serveFn := serve
	if cfg.instances > 0 {
		serveFn = demo.supervise(stderr) // the lab over N storefront children (validate checked demo is built in)
	}
	if err := serveFn(ctx, cfg, getenv, logger); err != nil {
		logger.Error("stockguard failed", "err", err)
		return 1
	}
	notice(logger, "stopped")
	return 0
}

// serve wires the database, Redis, locks, service and HTTP server, serves until ctx ends, and
// then takes them down in reverse order: stop accepting and finish in-flight requests, close
// the lock client, Redis clients and any Redis it started, and the database.
func serve(ctx context.Context, cfg config, getenv func(string) string, logger *slog.Logger) error {
	// Tracing (internal/tracing): nil, and nothing installed below, unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
	tr, err := tracing.FromEnv(getenv)
	if err != nil {
		return err
	} else if tr != nil {
		notice(logger, "tracing", "service", tr.Service(), "note", "OTLP traces of requests, holds, Redis and SQL (docs/operations.md#tracing)")
	}
	defer closeLogged(logger, "tracing", tr.Close) // last: the spans of the shutdown are flushed
	db, err := models.Open(ctx, cfg.db, models.WithLogger(logger), models.WithMaxOpenConns(cfg.dbPool),
		models.WithStatementTimeout(cfg.dbStmtTimeout), models.WithOpenDB(tr.OpenDB(string(models.BackendOf(cfg.db)))))
	if err != nil {
		return err
	}
	defer closeLogged(logger, "database", func() error { return models.Close(db) })
	backend := models.BackendOfDB(db)
	notice(logger, "database", "backend", backend)
	if seeded, err := models.SeedDemo(ctx, db); err != nil {
		return fmt.Errorf("seed demo catalogue: %w", err)
	} else if seeded {
		logger.Info("database was empty: demo catalogue seeded", "backend", backend)
	}

	reg := prometheus.NewRegistry()
	if sqlDB, err := db.DB(); err != nil {
		return fmt.Errorf("database pool metrics: %w", err)
	} else if err := handlers.RegisterDBStats(reg, sqlDB); err != nil { // the pool's go_sql_* metrics
		return err
	}
	brk := newBreakers(reg, logger, inventory.BreakerSpans(tr.Tracer())) // breaker.go: one per Redis node
	defer closeLogged(logger, "redis breakers", brk.Close)
	rb, err := openRedis(ctx, cfg.redisURLList(), cfg.redisCluster, getenv, logger, brk)
	if err != nil {
		return err
	}
	defer rb.close()
	if err := tr.InstrumentRedis(append(rb.nodes, rb.client)...); err != nil {
		return err
	}

	metrics := handlers.NewMetrics(reg)
	held := &inventory.LockSet{}
	var extra demoStorefront // the demo's additions to this process: none without --demo
	if cfg.demo && demo.storefront != nil {
		extra = demo.storefront(ctx, cfg, rb.client)
		defer closeLogged(logger, "demo", extra.Close) // after the requests drained
	}

	lockOpts := func(prefix, component string) *locking.Options {
		hooks := locking.JoinHooks(inventory.ObserverHooks(metrics), held.Hooks(prefix))
		if extra != nil {
			hooks = locking.JoinHooks(hooks, extra.LockHooks())
		}
		return &locking.Options{
			KeyPrefix:   prefix,
			Lease:       cfg.lockLease,
			Wait:        cfg.lockWait,
			CallTimeout: cfg.redisCall,
			Replicas:    cfg.lockReplicas,
			Breakers:    brk,
			Logger:      logger.With("component", component),
			Hooks:       hooks,
		}
	}
	lockClient := locking.New(rb.client, lockOpts(inventory.LockKeyPrefix, "locking"))
	defer closeLogged(logger, "lock client", lockClient.Close)
	notice(logger, "lock process", "process", lockClient.Process(),
		"note", "lock+guard's locks name this process; another process takes them over about a second after it dies")
	if cfg.lockReplicas > 0 {
		notice(logger, "lock replicas", "replicas", cfg.lockReplicas, "wait_timeout", cfg.redisCall,
			"note", "each lock acquisition and renewal waits for this many replicas to acknowledge it (WAIT)")
	}
	var redlock inventory.Locker
	if nodes := rb.nodes; len(nodes) > 1 {
		rl := locking.NewRedlock(nodes, lockOpts(inventory.RedlockKeyPrefix, "redlock"))
		defer closeLogged(logger, "redlock", rl.Close)
		redlock = inventory.NewRedlockLocker(rl)
		notice(logger, "redlock", "nodes", len(nodes), "quorum", rl.Quorum(), "strategy", inventory.StrategyRedlockGuard)
	}
	var admission inventory.Admission
	if cfg.maxInflight > 0 {
		sem := locking.NewSemaphore(rb.client, cfg.maxInflight, &locking.Options{
			KeyPrefix:   inventory.InflightKeyPrefix,
			Lease:       cfg.lockLease,
			CallTimeout: cfg.redisCall,
			Breakers:    brk,
			Logger:      logger.With("component", "admission"),
		})
		defer closeLogged(logger, "admission semaphore", sem.Close)
		admission = inventory.NewAdmission(sem, 0)
		notice(logger, "admission limit", "max_inflight_per_item", cfg.maxInflight)
	}

	if cfg.onRedisDown == inventory.OnRedisDownGuard {
		notice(logger, "on-redis-down", "policy", cfg.onRedisDown,
			"note", "lock+guard and redlock+guard sell through the database guard alone while Redis is unreachable")
	}
	icfg := inventory.Config{
		DB:           db,
		Locker:       inventory.NewLocker(lockClient),
		Redlock:      redlock,
		Admission:    admission,
		Default:      cfg.strategy,
		MaxBatch:     cfg.maxBatch,
		StreamHold:   cfg.streamHold,
		StreamAlone:  cfg.streamAlone,
		HoldTTL:      cfg.holdTTL,
		Holds:        metrics,
		Logger:       logger.With("component", "inventory"),
		Checks:       breakerChecks(rb.checks, cfg.onRedisDown),
		OnRedisDown:  cfg.onRedisDown,
		WriteTimeout: cfg.writeTimeout(),
		Tracer:       tr.Tracer(),
	}
	if extra != nil {
		extra.Inventory(&icfg, lockOpts(inventory.LockKeyPrefix, "locking-stall"))
	}
	svc, err := inventory.NewService(icfg)
	if err != nil {
		return err
	}
	defer closeLogged(logger, "inventory workers", svc.Close) // after the requests drained
	reg.MustRegister(handlers.NewOverdueHolds(svc.OverdueHolds, logger))

	token := cfg.adminToken
	if token == "" {
		token = randomToken()
		notice(logger, "no --admin-token or ADMIN_TOKEN: generated one for this run", "admin_token", token)
	}
	hcfg := handlers.Config{
		Service:         svc,
		AdminToken:      token,
		Demo:            cfg.demo,
		DefaultStrategy: cfg.strategy,
		Logger:          logger,
		Metrics:         metrics,
		Debug:           held,
		MaxPurchases:    cfg.maxPurchases,
		// On a non-loopback address the demo's profiles (and the lab's mutating routes,
		// demo.go) take the admin token.
		ProfilesNeedAdmin: cfg.exposed(),
		Trace:             tr.Gin(),
	}
	if extra != nil {
		extra.Handlers(&hcfg, svc)
	}
	return listenAndServe(ctx, cfg, handlers.LeakPurchases(ctx, handlers.New(hcfg), logger), logger) // none but under -tags leaktest
}

// demo is what the demo adds to the command; demo.go sets it from init. Built with the nodemo
// tag (or with demo.go deleted) both stay nil: --demo then serves the storefront's own demo
// mode (X-Strategy, X-Simulated-Work, /api/debug/locks) and the shop page, and --instances
// is refused.
var demo struct {
	// storefront returns the demo's additions to one --demo storefront process (the demo
	// strategies' locks, the lab's events, faults and page).
	storefront func(ctx context.Context, cfg config, rdb redis.UniversalClient) demoStorefront
	// supervise returns the serve function of --demo --instances N: the lab over N storefront
	// processes, whose log lines go to stderr.
	supervise func(stderr io.Writer) serveFunc
	// strategies describes the demo's strategies, offered after the built-in ones with --demo.
	strategies func() []inventory.StrategyInfo
}

// serveFunc serves until ctx ends (serve is the storefront's).
type serveFunc func(ctx context.Context, cfg config, getenv func(string) string, logger *slog.Logger) error

// demoStorefront is what the demo adds to one storefront process, in serve's order: hooks on
// every item lock client, then to the inventory configuration (lockOpts: the item locks'
// options), then to the handlers' configuration; Close after the server has drained.
type demoStorefront interface {
	LockHooks() locking.Hooks
	Inventory(icfg *inventory.Config, lockOpts *locking.Options)
	Handlers(hcfg *handlers.Config, svc *inventory.Service)
	Close() error
}

// listenAndServe serves handler on cfg.addr until ctx ends, then shuts the server down: it
// stops accepting and waits up to cfg.shutdownTimeout for in-flight requests.
func listenAndServe(ctx context.Context, cfg config, handler http.Handler, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	// Requests run under base: cancelling it aborts what is still running when shutdown's
	// grace period is over (lock waits and simulated work end; transactions are short).
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	running := &inflight{}
	srv := &http.Server{
		Handler:           running.wrap(handler),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      cfg.lockWait + 2*inventoryMaxWork + cfg.stallFor() + 30*time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	notice(logger, "listening", "addr", ln.Addr().String(), "demo", cfg.demo, "strategy", cfg.strategy)
	announceDemo(logger, cfg, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	notice(logger, "shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Grace is over: cancel what still runs, close the connections, and wait (bounded)
		// for the handlers to return before the caller closes the database and Redis.
		cancelBase()
		_ = srv.Close()
		wctx, wcancel := context.WithTimeout(context.Background(), abortWait)
		defer wcancel()
		if werr := running.wait(wctx); werr != nil {
			logger.Error("requests still running after they were cancelled", "waited", abortWait)
		}
		return fmt.Errorf("shutdown: in-flight requests did not finish in %s: %w", cfg.shutdownTimeout, err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// abortWait bounds the wait for cancelled requests after the shutdown grace period: a
// cancelled purchase returns at once, but one inside its short write transaction finishes it
// (bounded by the transaction's deadline, --db-statement-timeout x2).
const abortWait = 10 * time.Second

// inventoryMaxWork is the longest simulated work of a demo purchase.
const inventoryMaxWork = inventory.MaxWork

// randomToken returns 32 random hex characters.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// closeLogged runs closeFn and logs its error, naming what was closed.
func closeLogged(logger *slog.Logger, what string, closeFn func() error) {
	if err := closeFn(); err != nil {
		logger.Warn("close failed", "what", what, "err", err)
	}
}

// labInstanceEnv marks a storefront process the lab's supervisor started (demo.go sets it):
// such a process does not announce the lab, its supervisor does.
const labInstanceEnv = "STOCKGUARD_LAB_INSTANCE"

// announceDemo logs, for a demo server, where its page is and what it exposes: on loopback
// nothing beyond this machine; on any other address, the lab's mutating routes and Go's
// profiles take the admin token.
func announceDemo(logger *slog.Logger, cfg config, addr net.Addr) {
	if !cfg.labLink {
		return
	}
	host, port, _ := net.SplitHostPort(addr.String())
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = "localhost"
	}
	page := "the shop page"
	if demo.supervise != nil {
		page = "the lock lab"
	}
	notice(logger, "open "+page, "url", "http://"+net.JoinHostPort(host, port)+"/")
	if cfg.exposed() {
		notice(logger, "demo mode on a non-loopback address: anyone who reaches it may buy and read; "+
			"the lab's run, pause, kill, lease, kill lesson and reset and /debug/pprof/ need Authorization: Bearer <admin token>", "addr", cfg.addr)
	}
}
