package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
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
	var addr string
	if path, err := lookPath("redis-server", getenv("PATH")); err == nil {
		child, err := startRedisChild(path)
		if err != nil {
			return nil, err
		}
		b.mode, addr = redisModeChild, child.addr
		b.closers = append(b.closers, child.stop)
		notice(logger, "redis", "mode", b.mode, "addr", addr, "pid", child.cmd.Process.Pid, "binary", path)
	} else {
		mem, err := startMiniredis()
		if err != nil {
			return nil, err
		}
		b.mode, addr = redisModeMemory, mem.addr
		b.closers = append(b.closers, mem.stop)
		notice(logger, "redis", "mode", b.mode, "addr", addr,
			"note", "no --redis and no redis-server on PATH: in-process miniredis, state is lost on exit")
	}
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

// redisChild is a redis-server child process without persistence on a loopback port.
type redisChild struct {
	cmd    *exec.Cmd
	addr   string
	dir    string
	exited chan struct{}
	once   sync.Once
}

// startRedisChild starts redis-server on a free loopback port and waits until it answers.
// The child gets SIGKILL if this process dies (Pdeathsig), and runs in its own process group
// so that a terminal's Ctrl-C reaches only this process, which then shuts down in order.
func startRedisChild(path string) (*redisChild, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken before redis binds it
		var c *redisChild
		if c, err = tryRedisChild(path); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func tryRedisChild(path string) (*redisChild, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "stockguard-redis-*")
	if err != nil {
		return nil, err
	}
	out := &limitedBuffer{max: 4 << 10}
	cmd := exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", "")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	c := &redisChild{cmd: cmd, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	if err := waitPing(c.addr, c.exited, 5*time.Second); err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-server on %s: %w (output: %q)", c.addr, err, out.String())
	}
	return c, nil
}

// stop sends SIGTERM, then SIGKILL after 3s, waits for the exit and removes the directory.
func (c *redisChild) stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(3 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		_ = os.RemoveAll(c.dir)
	})
}

// waitPing pings addr until it answers, the process exits or limit passes.
func waitPing(addr string, exited <-chan struct{}, limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited during start-up")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %s: %w", limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// memRedis is an in-process miniredis. miniredis only expires keys when its clock is moved,
// so a ticker moves it with real time.
type memRedis struct {
	m    *miniredis.Miniredis
	addr string
	done chan struct{}
	wg   sync.WaitGroup
}

// memTick is how often the in-process Redis clock is advanced (the TTL resolution).
const memTick = 25 * time.Millisecond

func startMiniredis() (*memRedis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start in-process redis: %w", err)
	}
	r := &memRedis{m: m, addr: m.Addr(), done: make(chan struct{})}
	r.wg.Add(1)
	go r.advance()
	return r, nil
}

func (r *memRedis) advance() {
	defer r.wg.Done()
	t := time.NewTicker(memTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.done:
			return
		case now := <-t.C:
			r.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

func (r *memRedis) stop() {
	close(r.done)
	r.wg.Wait()
	r.m.Close()
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
