package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/models"
)

// config is the server's configuration: flags, each with an environment fallback.
type config struct {
	addr            string
	db              string
	dbPool          int
	dbStmtTimeout   time.Duration
	redisURLs       string
	redisCluster    bool
	onRedisDown     string
	strategy        string
	lockLease       time.Duration
	lockWait        time.Duration
	lockReplicas    int // --lock-replicas: replicas that must acknowledge each lock (locking.Options.Replicas)
	adminToken      string
	demo            bool
	maxInflight     int
	instances       int // --demo: supervise this many storefront processes (the lab, demo.go)
	maxBatch        int
	streamHold      time.Duration
	streamAlone     bool
	redisCall       time.Duration // --redis-call-timeout (breaker.go)
	maxPurchases    int           // --max-purchases: purchases in flight per process, 0 = no bound
	holdTTL         time.Duration // a stock hold's life when its request names none
	logLevel        slog.Level
	shutdownTimeout time.Duration
	// dbGiven tells whether --db (or DATABASE_URL) was given: --demo without it runs on a
	// fresh SQLite file of its own (run makes it), never on the storefront's stockguard.db.
	dbGiven bool
	// labLink: log the demo's page address once listening (not in a lab instance, whose
	// supervisor logs its own).
	labLink bool
}

// envOf names the environment variable read when a flag is not given on the command line.
var envOf = map[string]string{
	"addr":                  "ADDR",
	"db":                    "DATABASE_URL",
	"db-pool":               "DB_POOL",
	"db-statement-timeout":  "DB_STATEMENT_TIMEOUT",
	"redis":                 "REDIS_URL",
	"redis-cluster":         "REDIS_CLUSTER",
	"on-redis-down":         "ON_REDIS_DOWN",
	"strategy":              "STRATEGY",
	"lock-lease":            "LOCK_LEASE",
	"lock-wait":             "LOCK_WAIT",
	"lock-replicas":         "LOCK_REPLICAS",
	"admin-token":           "ADMIN_TOKEN",
	"demo":                  "DEMO",
	"max-inflight-per-item": "MAX_INFLIGHT_PER_ITEM",
	"instances":             "INSTANCES",
	"max-batch":             "MAX_BATCH",
	"stream-hold":           "STREAM_HOLD",
	"stream-alone":          "STREAM_ALONE",
	"redis-call-timeout":    "REDIS_CALL_TIMEOUT",
	"max-purchases":         "MAX_PURCHASES",
	"hold-ttl":              "HOLD_TTL",
	"log-level":             "LOG_LEVEL",
	"shutdown-timeout":      "SHUTDOWN_TIMEOUT",
}

// parseConfig reads the flags in args; a flag absent from args takes its environment variable
// (getenv) when that is not empty, else its default. It returns flag.ErrHelp for -h.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("stockguard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", ":8080", "listen address; host:0 picks a free port; "+demoAddr+" by default with --demo")
	fs.StringVar(&c.db, "db", "stockguard.db", "database: a postgres:// or postgresql:// URL for PostgreSQL,\n"+
		"anything else is an SQLite file (or a file: URI); with --demo and no --db: a fresh SQLite file, deleted at exit")
	fs.IntVar(&c.dbPool, "db-pool", 0, fmt.Sprintf("database connection pool size per process; 0: %d for PostgreSQL, max(4, GOMAXPROCS) for SQLite",
		models.DefaultPostgresPool))
	durationVar(fs, &c.dbStmtTimeout, "db-statement-timeout", 5*time.Second, "longest a database statement may run or wait for a lock\n"+
		"(PostgreSQL statement_timeout; SQLite busy timeout); every write transaction gets twice that as its deadline")
	fs.StringVar(&c.redisURLs, "redis", "", "Redis URL redis://host:port/db; several comma-separated for Redlock.\n"+
		"Sentinel: redis://sentinel:port?master_name=NAME&addr=sentinel2:port... (the master_name marks it).\n"+
		"Cluster: redis://node:port?addr=node2:port... with --redis-cluster.\n"+
		"Empty: a redis-server child process if one is on PATH, else an in-process Redis")
	fs.BoolVar(&c.redisCluster, "redis-cluster", false, "the --redis URLs name Redis Cluster nodes (go-redis ParseClusterURL form)")
	fs.StringVar(&c.onRedisDown, "on-redis-down", inventory.OnRedisDownFail, "when Redis is unreachable, lock+guard and redlock+guard (and the admission limit):\n"+
		"fail (503 unavailable) or guard (sell through the database guard alone, orders marked degraded)")
	fs.StringVar(&c.strategy, "strategy", inventory.StrategyLockGuard, "default purchase strategy: "+strategyNames())
	durationVar(fs, &c.lockLease, "lock-lease", 30*time.Second, "lease of an item lock (renewed by the watchdog); "+demoLease.String()+" by default with --demo")
	durationVar(fs, &c.lockWait, "lock-wait", 5*time.Second, "longest wait for an item lock before 503 lock_timeout")
	fs.IntVar(&c.lockReplicas, "lock-replicas", 0, "replicas of the Redis master that must acknowledge each lock acquisition and renewal\n"+
		"(WAIT, within --redis-call-timeout); fewer give the lock back and try again until --lock-wait,\n"+
		"then 503 lock_not_replicated. Needs one --redis deployment with replicas (Sentinel, or a master with replicas; 0 = off)")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token of POST /api/admin/reset; empty: a random one, logged once")
	fs.BoolVar(&c.demo, "demo", false, "demo mode, for learning on your own machine: accept X-Strategy and X-Simulated-Work,\n"+
		"serve /api/debug/locks and Go's profiles (/debug/pprof/); unless built with -tags nodemo, offer the demo\n"+
		"strategies and serve the lock lab at / (X-Fault, /api/events, /api/lab: runs, SIGSTOP, catalogue reset).\n"+
		"Listens on "+demoAddr+" unless --addr says otherwise; on any other address the lab's run, pause and\n"+
		"reset and /debug/pprof/ need the admin token, and on loopback they need none")
	fs.IntVar(&c.instances, "instances", 0, "with --demo: serve the lab and start this many storefront processes sharing the\n"+
		"database and Redis (0: this process is the one storefront)")
	fs.IntVar(&c.maxInflight, "max-inflight-per-item", 0, "admission limit of concurrent purchases per item (0 = off)")
	fs.IntVar(&c.maxBatch, "max-batch", inventory.DefaultMaxBatch, "most purchases of one item one lock hold of lock+guard sells (1 = one per hold)")
	durationVar(fs, &c.streamHold, "stream-hold", 0, "how long one hold of lock+guard keeps admitting the buyers of its item who arrive\n"+
		"while it works, even when another instance waits for the lock (0: only those waiting when it begins)")
	fs.BoolVar(&c.streamAlone, "stream-alone", true, "a hold of lock+guard keeps admitting the buyers of its item who arrive while it works\n"+
		"for as long as no other instance waits for its locks: behind a balancer that sends each item to one\n"+
		"instance, one hold serves them all; false: a hold sells to the buyers waiting when it begins (and --stream-hold)")
	durationVar(fs, &c.redisCall, "redis-call-timeout", DefaultRedisCallTimeout, "longest one lock call may wait for Redis; three failed calls in a row\n"+
		"open the node's circuit breaker (lock calls then fail at once until a probe answers)")
	fs.IntVar(&c.maxPurchases, "max-purchases", DefaultMaxPurchases, "most purchases in flight in this process; past it a purchase is answered\n"+
		"503 at_capacity with Retry-After at once (0 = no bound)")
	durationVar(fs, &c.holdTTL, "hold-ttl", inventory.DefaultHoldTTL, fmt.Sprintf("life of a stock hold (POST /api/holds) that names no ttl, %s..%s",
		inventory.MinHoldTTL, inventory.MaxHoldTTL))
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "`level` of the log: debug, info, warn or error")
	durationVar(fs, &c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long shutdown waits for in-flight requests")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " [$" + envOf[f.Name] + "]" })
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: stockguard [flags]\n\nEach flag falls back to the environment variable in brackets.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := applyEnv(fs, getenv); err != nil {
		return c, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true }) // flag or variable
	c.dbGiven = given["db"]
	if c.demo && !given["lock-lease"] {
		c.lockLease = demoLease // short, so that the lab can show a lease running out
	}
	if c.demo && !given["addr"] {
		c.addr = demoAddr // the demo's unauthenticated lab stays on this machine
	}
	return c, c.validate()
}

// applyEnv sets each flag that was not given on the command line from its environment
// variable, when that is set and not empty.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := envOf[f.Name]
		v := getenv(env)
		if given[f.Name] || env == "" || v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("invalid value %q for %s: %v", v, env, err))
		}
	})
	return errors.Join(errs...)
}

// demoLease is the default lock lease in demo mode, demoAddr its default listen address (loopback
// only); maxInstances bounds --instances; maxLockReplicas bounds --lock-replicas.
const (
	maxLockReplicas = 16
	demoLease       = 2 * time.Second
	demoAddr        = "127.0.0.1:8080"
	maxInstances    = 16
)

// exposed reports whether a demo server listens beyond loopback: then the lab's mutating
// routes and Go's profiles need the admin token. An address without a host (":8080"), an
// unspecified one (0.0.0.0, [::]) or a name other than localhost counts as exposed.
func (c config) exposed() bool {
	if !c.demo {
		return false
	}
	host, _, err := net.SplitHostPort(c.addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || !ip.IsLoopback()
}

// durationVar defines a duration flag whose parse error says what is expected (flag's own
// says only "parse error").
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// durationValue is a time.Duration flag.Value.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a Go duration with its unit, such as 3s, 500ms or 1m30s (%w)", err)
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return (*time.Duration)(d).String() }

// stallFor is the length of the demo stall fault and of the lab's pause: three leases.
func (c config) stallFor() time.Duration {
	if !c.demo {
		return 0
	}
	return 3 * c.lockLease
}

func (c config) validate() error {
	switch {
	case !inventory.ValidStrategy(c.strategy) && !demoOnly(c.strategy):
		return fmt.Errorf("unknown strategy %q", c.strategy)
	case demoOnly(c.strategy) && !c.demo:
		return fmt.Errorf("strategy %q is demo-only (it exists to be seen failing or compared): it needs --demo", c.strategy)
	case c.lockLease < 100*time.Millisecond:
		return fmt.Errorf("--lock-lease %s is too short (at least 100ms)", c.lockLease)
	case c.lockWait <= 0:
		return fmt.Errorf("--lock-wait %s must be positive", c.lockWait)
	case c.dbPool < 0 || c.dbPool > 1000:
		return fmt.Errorf("--db-pool %d must be 0..1000", c.dbPool)
	case c.dbStmtTimeout < 10*time.Millisecond || c.dbStmtTimeout > 10*time.Minute:
		return fmt.Errorf("--db-statement-timeout %s must be 10ms..10m", c.dbStmtTimeout)
	case c.instances < 0 || c.instances > maxInstances:
		return fmt.Errorf("--instances %d must be 0..%d", c.instances, maxInstances)
	case c.instances > 0 && !c.demo:
		return errors.New("--instances needs --demo (it starts the lab)")
	case c.instances > 0 && demo.supervise == nil:
		return errors.New("--instances needs the lab, which this build leaves out (built with -tags nodemo)")
	case c.onRedisDown == "" || !inventory.ValidOnRedisDown(c.onRedisDown):
		return fmt.Errorf("--on-redis-down %q: want %s or %s", c.onRedisDown, inventory.OnRedisDownFail, inventory.OnRedisDownGuard)
	case c.streamHold < 0 || c.streamHold > time.Minute:
		return fmt.Errorf("--stream-hold %s must be 0..1m", c.streamHold)
	case c.maxBatch < 1 || c.maxBatch > 10000:
		return fmt.Errorf("--max-batch %d must be 1..10000", c.maxBatch)
	case c.holdTTL < inventory.MinHoldTTL || c.holdTTL > inventory.MaxHoldTTL:
		return fmt.Errorf("--hold-ttl %s must be %s..%s", c.holdTTL, inventory.MinHoldTTL, inventory.MaxHoldTTL)
	case c.lockReplicas < 0 || c.lockReplicas > maxLockReplicas:
		return fmt.Errorf("--lock-replicas %d must be 0..%d", c.lockReplicas, maxLockReplicas)
	case c.lockReplicas > 0 && len(c.redisURLList()) == 0:
		return errors.New("--lock-replicas needs --redis naming a deployment with replicas: the Redis started without --redis has none, so no lock would ever be acknowledged")
	case c.lockReplicas > 0 && len(c.redisURLList()) > 1:
		return errors.New("--lock-replicas does not apply to Redlock (several --redis URLs): its nodes are independent masters without replicas to wait for")
	case c.maxInflight < 0:
		return fmt.Errorf("--max-inflight-per-item %d is negative", c.maxInflight)
	case c.redisCall < 10*time.Millisecond || c.redisCall > 10*time.Second:
		return fmt.Errorf("--redis-call-timeout %s must be 10ms..10s", c.redisCall)
	case c.maxPurchases < 0:
		return fmt.Errorf("--max-purchases %d is negative", c.maxPurchases)
	case c.shutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout %s must be positive", c.shutdownTimeout)
	}
	for _, u := range c.redisURLList() {
		if _, err := redisKindOf(u, c.redisCluster); err != nil {
			return fmt.Errorf("--redis %q: %w", redactURL(u), err)
		}
	}
	return nil
}

// redisURLList returns the comma-separated Redis URLs, trimmed, without empty entries.
func (c config) redisURLList() []string {
	var urls []string
	for _, u := range strings.Split(c.redisURLs, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// strategyNames lists the strategies of inventory's table, in its order, then the demo's.
func strategyNames() string {
	var names []string
	for _, st := range inventory.StrategyTable() {
		names = append(names, st.Name)
	}
	if demo.strategies == nil {
		return strings.Join(names, ", ")
	}
	for _, st := range demo.strategies() {
		names = append(names, st.Name+" (demo)")
	}
	return strings.Join(names, ", ") + ";\nthose marked (demo) are demo-only: they need --demo"
}

// demoOnly reports whether name is one of the demo's strategies (offered with --demo only).
func demoOnly(name string) bool {
	if demo.strategies == nil {
		return false
	}
	for _, st := range demo.strategies() {
		if st.Name == name {
			return true
		}
	}
	return false
}

// writeTimeout is the deadline of every write transaction: twice the statement timeout, so
// that a transaction's statement that waits for a lock fails on its own timeout first.
func (c config) writeTimeout() time.Duration { return 2 * c.dbStmtTimeout }
