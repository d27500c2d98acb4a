// Package cluster starts and stops what a self-contained run needs: the storefront processes,
// their Redis (one server, Sentinel, proxied links, a clock that can be stepped) and PostgreSQL.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/netfault"
	"github.com/stockguard/stockguard/internal/pgproc"
	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/internal/storefrontbin"
)

// Config describes the storefront processes of a self-contained run.
type Config struct {
	Bin       string        // storefront binary; "" builds it from the module root
	Instances int           // number of storefront processes
	Lease     time.Duration // --lock-lease for every instance; 0 keeps the server default
	DB        string        // "sqlite" (or ""), "postgres" (a private server) or a postgres:// URL
	Args      []string      // more flags for every instance
	RedisDir  string        // a redis-server (required) whose snapshots go there; "" for none
	Log       io.Writer     // where progress lines go (may be nil)
	// Redis is the Redis topology: "" one redis-server (or miniredis); TopologySentinel a
	// master, a replica and three Sentinels, the instances connecting through Sentinel;
	// TopologyProxied one redis-server reached by each instance through its own in-process
	// TCP proxy (internal/netfault), whose link the chaos can cut or slow.
	Redis string
	// InstanceArgs, when not nil, holds extra flags per instance (len == Instances).
	InstanceArgs [][]string
}

// Redis topologies of a self-contained cluster.
const (
	TopologySentinel = "sentinel"
	TopologyProxied  = "proxied"
)

// Cluster is a set of storefront processes sharing one database (an SQLite file, a private
// PostgreSQL server, or a given PostgreSQL URL) and one Redis, all started by the load test.
// Close stops every process and removes the temporary directory.
type Cluster struct {
	Dir        string
	AdminToken string
	Redis      *RedisServer           // one redis-server (also behind the proxies); nil with Sentinel
	Sentinel   *redisproc.SentinelSet // TopologySentinel
	Links      []*netfault.Link       // TopologyProxied: instance i's link to Redis
	Clock      *RedisClock            // TopologyClock: steps the redis-server's clock (clock.go)
	DB         string                 // "sqlite", "postgres" (private server) or "postgres (url)"
	Postgres   *pgproc.Server         // the private PostgreSQL server; nil otherwise
	Instances  []*Instance

	bin      string
	args     []string
	redisURL func(i int) string // --redis of instance i
	mu       sync.Mutex
	more     []*Instance // started by StartInstance
}

// BuildStorefront builds the storefront binary (the module at root) into dir: the command's
// own build (-bin names another), whatever STOCKGUARD_BIN says.
func BuildStorefront(ctx context.Context, root, dir string) (string, error) {
	bin, err := storefrontbin.Build(ctx, root, dir)
	if err != nil {
		return "", fmt.Errorf("build storefront: %s", firstLine([]byte(err.Error())))
	}
	return bin, nil
}

// moduleRoot returns the directory of the go.mod governing the working directory.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the stockguard module: run from the repository (or pass -bin)")
	}
	return filepath.Dir(gomod), nil
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	return s
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start builds the storefront if needed, starts Redis and cfg.Instances storefront
// processes, and waits until every one answers /readyz. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if cfg.Instances < 1 {
		return nil, errors.New("instances must be at least 1")
	}
	if cfg.InstanceArgs != nil && len(cfg.InstanceArgs) != cfg.Instances {
		return nil, fmt.Errorf("%d instance argument lists for %d instances", len(cfg.InstanceArgs), cfg.Instances)
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", a...)
		}
	}
	dir, err := os.MkdirTemp("", "stockguard-loadtest-*")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, AdminToken: randomToken()}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	bin := cfg.Bin
	if bin == "" {
		root, err := moduleRoot(ctx)
		if err != nil {
			return c, err
		}
		logf("building the storefront (%s)", root)
		if bin, err = BuildStorefront(ctx, root, dir); err != nil {
			return c, err
		}
	}
	redisURL, err := c.startRedis(cfg)
	c.redisURL = redisURL
	if err != nil {
		return c, err
	}
	dsn, err := c.startDB(ctx, cfg.DB, logf)
	if err != nil {
		return c, err
	}
	args := []string{"--demo", "--addr", "127.0.0.1:0", "--db", dsn,
		"--admin-token", c.AdminToken}
	if cfg.Lease > 0 {
		args = append(args, "--lock-lease", cfg.Lease.String())
	}
	args = append(args, cfg.Args...)
	c.bin, c.args = bin, args
	for i := 0; i < cfg.Instances; i++ {
		args := append(append([]string(nil), args...), "--redis", redisURL(i))
		if cfg.InstanceArgs != nil {
			args = append(args, cfg.InstanceArgs[i]...)
		}
		in, err := startInstance(bin, args, i, dir)
		if err != nil {
			return c, err
		}
		c.Instances = append(c.Instances, in)
	}
	for _, in := range c.Instances {
		if err := in.waitListening(ctx, 30*time.Second); err != nil {
			return c, err
		}
	}
	for _, in := range c.Instances {
		if err := in.waitReady(ctx, 30*time.Second); err != nil {
			return c, err
		}
	}
	logf("%d storefront instance(s) ready: %s", len(c.Instances), strings.Join(c.URLs(), " "))
	return c, nil
}

// startRedis starts the Redis of cfg.Redis and returns the --redis URL of instance i.
func (c *Cluster) startRedis(cfg Config) (func(i int) string, error) {
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", a...)
		}
	}
	if cfg.Redis == TopologySentinel {
		path, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, errors.New("-chaos failover needs redis-server on PATH (apt-get install -y redis-server)")
		}
		// Quick Sentinel settings: a master is down after 500ms, a failover may take 2s.
		c.Sentinel, err = redisproc.StartSentinelSet(path, redisproc.SentinelConfig{
			DownAfter: 500 * time.Millisecond, FailoverTimeout: 2 * time.Second})
		if err != nil {
			return nil, err
		}
		logf("redis: master %s (pid %d), replica %s, sentinels %s", c.Sentinel.Master.Addr, c.Sentinel.Master.PID,
			c.Sentinel.Replicas[0].Addr, strings.Join(c.Sentinel.SentinelAddrs(), " "))
		url := c.Sentinel.URL()
		return func(int) string { return url }, nil
	}
	var env []string
	if cfg.Redis == TopologyClock || cfg.Redis == TopologyMix {
		var err error
		if c.Clock, env, err = prepareClock(context.Background(), c.Dir); err != nil {
			return nil, err
		}
	}
	dir := cfg.RedisDir
	if cfg.Redis == TopologyMix && dir == "" {
		// -chaos mix restarts the redis-server from its snapshot too: it keeps one here.
		dir = filepath.Join(c.Dir, "redis")
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
	}
	var err error
	if c.Redis, err = startRedis(dir, env...); err != nil {
		return nil, err
	}
	logf("redis: %s at %s", c.Redis.Kind, c.Redis.URL)
	if cfg.Redis != TopologyProxied && cfg.Redis != TopologyMix {
		return func(int) string { return c.Redis.URL }, nil
	}
	for i := 0; i < cfg.Instances; i++ {
		l, err := netfault.NewLink(c.Redis.Addr)
		if err != nil {
			return nil, err
		}
		c.Links = append(c.Links, l)
	}
	logf("redis: each instance through its own proxy (toxiproxy in-process)")
	return func(i int) string { return "redis://" + c.Links[i].Addr + "/0" }, nil
}

// URLs returns the base URL of every instance.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Instances))
	for i, in := range c.Instances {
		urls[i] = in.URL
	}
	return urls
}

// Instance returns instance i as it runs now: RestartInstance replaces it, and a reader on
// another goroutine than the fault's (the soak's sampler) must read it here, under the lock.
func (c *Cluster) Instance(i int) *Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Instances[i]
}

// StartInstance starts one more storefront process like the others (not in Instances) and
// waits until it is ready; Close stops it too.
func (c *Cluster) StartInstance(ctx context.Context) (*Instance, error) {
	c.mu.Lock()
	idx := len(c.Instances) + len(c.more)
	// Proxied: through instance 0's link (StartInstance is not used with the chaos proxies).
	in, err := startInstance(c.bin, append(c.args[:len(c.args):len(c.args)], "--redis", c.redisURL(0)), idx, c.Dir)
	if err == nil {
		c.more = append(c.more, in)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := in.waitListening(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return in, in.waitReady(ctx, 30*time.Second)
}

// RestartInstance kills instance i at once (SIGKILL, as a crash would: it releases nothing),
// waits down, and starts it again with the same command line on the same port (its clients see
// refused connections meanwhile), then waits until it is ready. It returns the new process;
// c.Instances[i] is replaced by it.
func (c *Cluster) RestartInstance(ctx context.Context, i int, down time.Duration) (*Instance, error) {
	c.mu.Lock()
	old := c.Instances[i]
	c.mu.Unlock()
	old.Kill()
	t := time.NewTimer(down)
	select { // no early return: the instance is started again whatever happens
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	addr := strings.TrimPrefix(old.URL, "http://")
	args := append([]string(nil), old.args...)
	for k := 0; k+1 < len(args); k++ {
		if args[k] == "--addr" {
			args[k+1] = addr
		}
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the old socket may linger briefly
		var in *Instance
		if in, err = startInstance(c.bin, args, i, c.Dir); err != nil {
			return nil, err
		}
		if err = in.waitListening(context.WithoutCancel(ctx), 30*time.Second); err != nil {
			in.stop(time.Second)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c.mu.Lock()
		c.Instances[i] = in
		c.mu.Unlock()
		return in, in.waitReady(context.WithoutCancel(ctx), 30*time.Second)
	}
	return nil, fmt.Errorf("start instance %d again on %s: %w", i, addr, err)
}

// Close stops every instance (concurrently), then Redis, and removes the temporary directory.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	c.mu.Lock()
	all := append(append([]*Instance(nil), c.Instances...), c.more...)
	c.mu.Unlock()
	for _, in := range all {
		wg.Add(1)
		go func() { defer wg.Done(); in.stop(5 * time.Second) }()
	}
	wg.Wait()
	for _, l := range c.Links {
		l.Close()
	}
	if c.Redis != nil {
		c.Redis.Close()
	}
	if c.Sentinel != nil {
		c.Sentinel.Close()
	}
	if c.Postgres != nil {
		c.Postgres.Close()
	}
	_ = os.RemoveAll(c.Dir)
}

// startDB returns the --db of the instances: an SQLite file in c.Dir, a database on a private
// PostgreSQL server it starts (internal/pgproc: loopback only, fsync off, each commit written
// to the kernel before it returns), or the given URL.
func (c *Cluster) startDB(ctx context.Context, db string, logf func(string, ...any)) (string, error) {
	switch {
	case db == "" || db == DBSQLite:
		c.DB = DBSQLite
		return filepath.Join(c.Dir, "stockguard.db"), nil
	case db == DBPostgres:
		c.DB = DBPostgres
		srv, err := pgproc.Start(pgproc.Options{})
		if err != nil {
			return "", err
		}
		c.Postgres = srv
		url, err := srv.CreateDatabase(ctx, "stockguard")
		if err != nil {
			return "", err
		}
		logf("postgres: private server at %s:%d (pid %d)", srv.Host, srv.Port, srv.PID())
		return url, nil
	default:
		c.DB = "postgres (url)"
		return db, nil
	}
}

// TopologyMix is TopologyProxied with the clock of TopologyClock: one redis-server whose clock
// the load test can step and which keeps a snapshot directory, reached by each instance through
// its own proxy (-chaos mix).
const TopologyMix = "mix"

// The -db choices besides a URL.
const (
	DBSQLite   = "sqlite"
	DBPostgres = "postgres"
)
