package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/redisproc"
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
	client  *redis.Client   // the node of the single-node lock
	nodes   []*redis.Client // every --redis URL (Redlock nodes when more than one)
	closers []func()        // run in reverse order by close
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
func openRedis(ctx context.Context, urls []string, getenv func(string) string, logger *slog.Logger) (*redisBackend, error) {
	if len(urls) > 0 {
		return dialRedis(ctx, urls, logger)
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
	addr := srv.Addr
	b.client = redis.NewClient(clientOptions(&redis.Options{Addr: addr}))
	b.nodes = []*redis.Client{b.client}
	b.closers = append(b.closers, func() { _ = b.client.Close() })
	return b, nil
}

// dialRedis builds one client per URL. An unreachable node is logged, not fatal: /readyz
// reports it and the lock strategies answer unavailable until it is back.
func dialRedis(ctx context.Context, urls []string, logger *slog.Logger) (*redisBackend, error) {
	b := &redisBackend{mode: redisModeURL}
	for _, u := range urls {
		opts, err := redis.ParseURL(u)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("--redis %q: %w", u, err)
		}
		c := redis.NewClient(clientOptions(opts))
		b.nodes = append(b.nodes, c)
		b.closers = append(b.closers, func() { _ = c.Close() })
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := c.Ping(pctx).Err(); err != nil {
			logger.Warn("redis node not reachable yet", "addr", opts.Addr, "err", err)
		}
		cancel()
	}
	b.client = b.nodes[0]
	notice(logger, "redis", "mode", b.mode, "nodes", len(b.nodes), "addr", b.client.Options().Addr)
	return b, nil
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
