package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// Redis modes, as logged at start.
const (
	redisModeURL    = "url"        // --redis given
	redisModeChild  = "child"      // a redis-server child process
	redisModeMemory = "in-process" // miniredis inside this process
)

// redisBackend is the Redis the server uses, and how to let go of it.
type redisBackend struct {
	mode    string
	client  redis.UniversalClient   // the deployment of the single-node lock (nodes[0])
	nodes   []redis.UniversalClient // every --redis URL (Redlock nodes when more than one)
	checks  []inventory.Check       // /readyz: every configured Redis node, by address
	closers []func()                // run in reverse order by close
}

// close closes the clients and stops a child process or in-process Redis.
func (b *redisBackend) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// openRedis selects the Redis to use: the --redis URLs when given; else a redis-server child
// on a free loopback port when redis-server is on PATH (as getenv sees it); else an
// in-process miniredis whose clock follows real time.
func openRedis(ctx context.Context, urls []string, cluster bool, getenv func(string) string, logger *slog.Logger, brk *locking.Breakers) (*redisBackend, error) {
	if len(urls) > 0 {
		return dialRedis(ctx, urls, cluster, logger, brk)
	}
	b := &redisBackend{}
	var srv *redisproc.Server
	if path, err := lookPath("redis-server", getenv("PATH")); err == nil {
		if srv, err = redisproc.StartChild(path, 0); err != nil {
			return nil, err
		}
		b.mode = redisModeChild
		notice(logger, "redis", "mode", b.mode, "addr", srv.Addr, "pid", srv.PID, "binary", path)
	} else {
		if srv, err = redisproc.StartMemory(); err != nil {
			return nil, err
		}
		b.mode = redisModeMemory
		notice(logger, "redis", "mode", b.mode, "addr", srv.Addr,
			"note", "no --redis and no redis-server on PATH: in-process miniredis, state is lost on exit")
	}
	b.closers = append(b.closers, srv.Close)
	c := redis.NewClient(clientOptions(&redis.Options{Addr: srv.Addr}))
	brk.Watch(srv.Addr, c)
	b.client, b.nodes = c, []redis.UniversalClient{c}
	b.checks = []inventory.Check{pingCheck("redis "+srv.Addr, c)}
	b.closers = append(b.closers, func() { _ = c.Close() })
	return b, nil
}

// Kinds of --redis URL.
const (
	redisKindSingle   = "single"   // redis://host:port/db (ParseURL)
	redisKindSentinel = "sentinel" // redis://sentinel:port?master_name=NAME&addr=sentinel2... (ParseFailoverURL)
	redisKindCluster  = "cluster"  // redis://node:port?addr=node2&addr=node3 with --redis-cluster (ParseClusterURL)
)

// redisKindOf tells the kind of a --redis URL. go-redis's failover and cluster parsers both
// accept redis://host?addr=...; the explicit marks are the master_name parameter (Sentinel:
// the master's name is what Sentinel needs, a cluster has none) and the --redis-cluster flag
// (REDIS_CLUSTER) for Cluster. A URL with master_name under --redis-cluster is refused.
func redisKindOf(raw string, cluster bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	sentinel := u.Query().Has("master_name")
	switch {
	case sentinel && cluster:
		return "", errors.New("a master_name (Sentinel) URL under --redis-cluster: choose one")
	case sentinel:
		return redisKindSentinel, nil
	case cluster:
		return redisKindCluster, nil
	}
	return redisKindSingle, nil
}

// dialRedis builds one client per URL: a plain client, a Sentinel-backed failover client or
// a cluster client, by redisKindOf. An unreachable node is logged, not fatal: /readyz reports
// it and the lock strategies answer unavailable until it is back.
func dialRedis(ctx context.Context, urls []string, cluster bool, logger *slog.Logger, brk *locking.Breakers) (*redisBackend, error) {
	b := &redisBackend{mode: redisModeURL}
	for i, u := range urls {
		kind, c, checks, err := dialOne(u, cluster, brk)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("--redis %q: %w", u, err)
		}
		b.nodes = append(b.nodes, c)
		b.closers = append(b.closers, func() { _ = c.Close() })
		for _, ch := range checks {
			if len(urls) > 1 {
				ch.Name = fmt.Sprintf("redlock node %d: %s", i, ch.Name)
			}
			b.checks = append(b.checks, ch)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := c.Ping(pctx).Err(); err != nil {
			logger.Warn("redis not reachable yet", "kind", kind, "url", redactURL(u), "err", err)
		}
		cancel()
		notice(logger, "redis", "mode", b.mode, "kind", kind, "url", redactURL(u))
	}
	b.client = b.nodes[0]
	return b, nil
}

// dialOne builds the client of one --redis URL and the readiness checks of its nodes: the
// server; the master (through Sentinel) and every Sentinel; every seed node and every master
// of the cluster (CLUSTER SHARDS as the cluster client sees it).
func dialOne(raw string, cluster bool, brk *locking.Breakers) (string, redis.UniversalClient, []inventory.Check, error) {
	kind, err := redisKindOf(raw, cluster)
	if err != nil {
		return "", nil, nil, err
	}
	switch kind {
	case redisKindSentinel:
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return "", nil, nil, err
		}
		failoverOptions(o)
		c := redis.NewFailoverClient(o)
		brk.Watch("master "+o.MasterName, c)
		checks := []inventory.Check{pingCheck("redis master "+o.MasterName+" (via sentinel)", c)}
		for _, addr := range o.SentinelAddrs {
			checks = append(checks, sentinelCheck(addr, o))
		}
		return kind, c, checks, nil
	case redisKindCluster:
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return "", nil, nil, err
		}
		clusterOptions(o)
		brk.WatchCluster(o) // a breaker per node: items on healthy masters keep their locks
		c := redis.NewClusterClient(o)
		checks := []inventory.Check{{Name: "redis cluster masters", Ping: func(ctx context.Context) error {
			return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
				if err := n.Ping(ctx).Err(); err != nil {
					return fmt.Errorf("%s: %w", n.Options().Addr, err)
				}
				return nil
			})
		}}}
		for _, addr := range o.Addrs {
			checks = append(checks, addrCheck("redis cluster node "+addr, addr, o.Username, o.Password))
		}
		return kind, c, checks, nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return "", nil, nil, err
	}
	c := redis.NewClient(clientOptions(o))
	brk.Watch(o.Addr, c)
	return kind, c, []inventory.Check{pingCheck("redis "+o.Addr, c)}, nil
}

// pingCheck is a readiness check that PINGs through c.
func pingCheck(name string, c redis.UniversalClient) inventory.Check {
	return inventory.Check{Name: name, Ping: func(ctx context.Context) error { return c.Ping(ctx).Err() }}
}

// addrCheck PINGs one node at addr with a short-lived connection (a seed node of a cluster is
// not a client of its own).
func addrCheck(name, addr, user, pass string) inventory.Check {
	return inventory.Check{Name: name, Ping: func(ctx context.Context) error {
		c := redis.NewClient(clientOptions(&redis.Options{Addr: addr, Username: user, Password: pass, PoolSize: 1}))
		defer c.Close()
		return c.Ping(ctx).Err()
	}}
}

// sentinelCheck asks the Sentinel at addr for the master's address.
func sentinelCheck(addr string, o *redis.FailoverOptions) inventory.Check {
	return inventory.Check{Name: "redis sentinel " + addr, Ping: func(ctx context.Context) error {
		c := redis.NewSentinelClient(clientOptions(&redis.Options{Addr: addr, Username: o.SentinelUsername,
			Password: o.SentinelPassword, PoolSize: 1}))
		defer c.Close()
		return c.GetMasterAddrByName(ctx, o.MasterName).Err()
	}}
}

// redactURL hides the password of a Redis URL for the log.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// clientOptions makes every call honour its context deadline (the lock library bounds each
// call that way) and keeps the network timeouts short, so a dead Redis fails fast.
func clientOptions(o *redis.Options) *redis.Options {
	o.ContextTimeoutEnabled = true
	o.DialTimeout = time.Second
	// A refused dial is retried once, not go-redis's default 5 times 100ms apart: a dead node
	// (a Redlock minority, a Redis that is down) then costs a purchase milliseconds, not 500ms.
	o.DialerRetries = 1
	o.DialerRetryTimeout = 20 * time.Millisecond
	o.ReadTimeout = 2 * time.Second
	o.WriteTimeout = 2 * time.Second
	o.PoolTimeout = 2 * time.Second
	o.MaxRetries = -1 // the caller decides whether to retry
	return o
}

// failoverOptions and clusterOptions apply clientOptions' settings to the Sentinel and
// Cluster clients. A cluster client follows MOVED/ASK redirections itself (MaxRedirects):
// they are not retries of a command that may have run.
func failoverOptions(o *redis.FailoverOptions) {
	c := clientOptions(&redis.Options{})
	o.ContextTimeoutEnabled, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = true, c.DialTimeout, c.ReadTimeout, c.WriteTimeout
	o.PoolTimeout, o.MaxRetries, o.DialerRetries, o.DialerRetryTimeout = c.PoolTimeout, c.MaxRetries, c.DialerRetries, c.DialerRetryTimeout
}

func clusterOptions(o *redis.ClusterOptions) {
	c := clientOptions(&redis.Options{})
	o.ContextTimeoutEnabled, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = true, c.DialTimeout, c.ReadTimeout, c.WriteTimeout
	o.PoolTimeout, o.MaxRetries, o.DialerRetries, o.DialerRetryTimeout = c.PoolTimeout, c.MaxRetries, c.DialerRetries, c.DialerRetryTimeout
}

// lookPath finds an executable named file in the directories of pathEnv (a PATH value).
func lookPath(file, pathEnv string) (string, error) {
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
