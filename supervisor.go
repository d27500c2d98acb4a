package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/inventory"
)

// supervisorExecutable is the program the supervisor starts as its instances (tests replace
// nothing: the test binary re-runs itself as the storefront, see TestMain).
var supervisorExecutable = os.Executable

// supervisorServe returns the serve function of --demo --instances N: this process serves the
// lab and starts N storefront children on free loopback ports, sharing its database,
// its Redis and its admin token (a SQLite file, or the --db PostgreSQL URL). The children run in their own process group and die with
// it (SIGKILL on its death); it stops them on shutdown, and it is the one that sends SIGSTOP
// and SIGCONT, since a process holding a lock cannot resume itself. Children's log lines go
// to stderr, prefixed with their index.
func supervisorServe(stderr io.Writer) func(context.Context, config, func(string) string, *slog.Logger) error {
	return func(ctx context.Context, cfg config, getenv func(string) string, logger *slog.Logger) error {
		redisURL, rdb, closeRedis, err := supervisorRedis(ctx, cfg, getenv, logger)
		if err != nil {
			return err
		}
		defer closeRedis()
		sup := &supervisor{rdb: rdb, pauseFor: cfg.stallFor(), log: logger, hc: &http.Client{Timeout: time.Second}}
		defer sup.stop(cfg.shutdownTimeout + 5*time.Second)

		sctx, cancel := context.WithCancelCause(ctx) // cancelled too by an instance that exits
		defer cancel(nil)
		if err := sup.start(sctx, cfg, redisURL, stderr, cancel); err != nil {
			return err
		}
		handler := handlers.NewSupervisor(handlers.SupervisorConfig{Supervisor: sup, Lease: cfg.lockLease, Logger: logger})
		notice(logger, "lab supervisor", "instances", len(sup.children), "pause_for", sup.pauseFor)
		if err := listenAndServe(sctx, cfg, handler, logger); err != nil {
			return err
		}
		if ctx.Err() == nil { // not a shutdown: an instance exited on its own
			return context.Cause(sctx)
		}
		return nil
	}
}

// supervisorRedis returns the Redis URL every instance uses: the first --redis URL, or a Redis
// started here (redis-server child, or in-process miniredis, which listens on loopback too).
func supervisorRedis(ctx context.Context, cfg config, getenv func(string) string, logger *slog.Logger) (string, redis.UniversalClient, func(), error) {
	urls := cfg.redisURLList()
	rb, err := openRedis(ctx, urls, cfg.redisCluster, getenv, logger, nil) // no breakers: the lab's own calls
	if err != nil {
		return "", nil, nil, err
	}
	url := strings.Join(urls, ",")
	if c, ok := rb.client.(*redis.Client); ok && url == "" {
		url = "redis://" + c.Options().Addr + "/0"
	}
	return url, rb.client, rb.close, nil
}

// supervisor holds the storefront children of the lab.
type supervisor struct {
	rdb      redis.UniversalClient // to confirm a holder in Redis before leaving it paused
	pauseFor time.Duration
	log      *slog.Logger
	hc       *http.Client
	children []*child
}

// child is one storefront process.
type child struct {
	index  int
	cmd    *exec.Cmd
	url    string
	done   chan struct{} // closed once the process has exited
	mu     sync.Mutex
	paused *time.Timer // set while SIGSTOPped: fires the SIGCONT
}

var listeningLine = regexp.MustCompile(`msg="?listening"?\s.*?\baddr=(\S+)`)

// start starts the children and waits until each one listens. A child that exits later, while
// the supervisor still runs, cancels ctx with the reason.
func (s *supervisor) start(ctx context.Context, cfg config, redisURL string, stderr io.Writer, fail context.CancelCauseFunc) error {
	exe, err := supervisorExecutable()
	if err != nil {
		return fmt.Errorf("supervisor: own executable: %w", err)
	}
	db := cfg.db
	if !strings.HasPrefix(db, "file:") && !strings.Contains(db, "://") { // a SQLite path: absolute

		if db, err = filepath.Abs(db); err != nil {
			return err
		}
	}
	token := cfg.adminToken
	if token == "" {
		token = randomToken()
		notice(s.log, "no --admin-token or ADMIN_TOKEN: generated one for this run (every instance uses it)", "admin_token", token)
	}
	args := []string{"--demo", "--instances", "0", "--addr", "127.0.0.1:0", "--db", db, "--redis", redisURL,
		"--admin-token", token, "--strategy", cfg.strategy, "--lock-lease", cfg.lockLease.String(),
		"--lock-wait", cfg.lockWait.String(), "--max-inflight-per-item", strconv.Itoa(cfg.maxInflight),
		"--db-pool", strconv.Itoa(cfg.dbPool), "--db-statement-timeout", cfg.dbStmtTimeout.String(),
		"--log-level", cfg.logLevel.String(), "--shutdown-timeout", cfg.shutdownTimeout.String(),
		"--redis-cluster=" + strconv.FormatBool(cfg.redisCluster), "--on-redis-down", cfg.onRedisDown}
	out := &lockedWriter{w: stderr}
	for i := range cfg.instances {
		addr := make(chan string, 1)
		cmd := exec.Command(exe, args...)
		cmd.Stdout = &lineWriter{prefix: "instance=" + strconv.Itoa(i) + " ", out: out, addr: addr}
		cmd.Stderr = cmd.Stdout
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.WaitDelay = 2 * time.Second
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("supervisor: start instance %d: %w", i, err)
		}
		c := &child{index: i, cmd: cmd, done: make(chan struct{})}
		s.children = append(s.children, c)
		go func() { // owner: the supervisor; ends when the process exits (stop makes sure)
			err := cmd.Wait()
			close(c.done)
			if ctx.Err() == nil {
				fail(fmt.Errorf("lab instance %d exited: %v", c.index, err))
			}
		}()
		select {
		case a := <-addr:
			c.url = "http://" + a
		case <-c.done:
			return fmt.Errorf("supervisor: instance %d exited during start-up (see its log above)", i)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("supervisor: instance %d did not listen within 30s", i)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		notice(s.log, "lab instance", "index", i, "pid", cmd.Process.Pid, "url", c.url)
	}
	return nil
}

// Instances lists the children for the lab page.
func (s *supervisor) Instances() []handlers.LabInstance {
	out := make([]handlers.LabInstance, len(s.children))
	for i, c := range s.children {
		out[i] = handlers.LabInstance{Index: i, PID: c.cmd.Process.Pid, Base: "/i/" + strconv.Itoa(i), URL: c.url}
	}
	return out
}

// Pause finds the child holding item's lock (asking each running child's /api/debug/locks),
// stops it with SIGSTOP, confirms in Redis that the lock is still its own (else continues it
// and looks again), and continues it with SIGCONT after pauseFor.
func (s *supervisor) Pause(ctx context.Context, itemID int64) (handlers.Paused, error) {
	for range 5 {
		c, held, ok := s.holder(ctx, itemID)
		if !ok {
			break
		}
		c.mu.Lock()
		if c.paused != nil {
			c.mu.Unlock()
			continue
		}
		if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			c.mu.Unlock()
			return handlers.Paused{}, fmt.Errorf("%w: SIGSTOP instance %d: %w", inventory.ErrUnavailable, c.index, err)
		}
		if !s.stillHeld(ctx, held) {
			_ = c.cmd.Process.Signal(syscall.SIGCONT) // it released between the look-up and the stop
			c.mu.Unlock()
			continue
		}
		c.paused = time.AfterFunc(s.pauseFor, func() { s.resume(c) })
		c.mu.Unlock()
		s.log.Info("lab: paused a lock holder", "instance", c.index, "pid", c.cmd.Process.Pid, "item", itemID, "token", held.Token, "for", s.pauseFor)
		return handlers.Paused{Instance: c.index, PID: c.cmd.Process.Pid, Token: held.Token, ForMS: float64(s.pauseFor.Milliseconds())}, nil
	}
	return handlers.Paused{}, fmt.Errorf("%w: item %d", handlers.ErrNotHeld, itemID)
}

// holder returns a running child that holds item's lock, and the lock.
func (s *supervisor) holder(ctx context.Context, itemID int64) (*child, inventory.HeldLock, bool) {
	for _, c := range s.children {
		c.mu.Lock()
		paused := c.paused != nil
		c.mu.Unlock()
		if paused {
			continue // a stopped process would not answer
		}
		var body struct {
			Locks []inventory.HeldLock `json:"locks"`
		}
		if err := getJSON(ctx, s.hc, c.url+"/api/debug/locks", &body); err != nil {
			continue
		}
		for _, l := range body.Locks {
			if l.ItemID == itemID {
				return c, l, true
			}
		}
	}
	return nil, inventory.HeldLock{}, false
}

// stillHeld tells whether the lock exists in Redis with its token as the last fencing token
// issued (the Redis keys are the ones /api/debug/locks names).
func (s *supervisor) stillHeld(ctx context.Context, held inventory.HeldLock) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n, err := s.rdb.Exists(ctx, held.RedisKey).Result()
	if err != nil || n == 0 {
		return false
	}
	fence, err := s.rdb.Get(ctx, held.FenceKey).Int64()
	return err == nil && fence == held.Token
}

// resume sends SIGCONT to a paused child.
func (s *supervisor) resume(c *child) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		return
	}
	c.paused.Stop()
	c.paused = nil
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	s.log.Info("lab: resumed", "instance", c.index)
}

// stop continues any paused child, asks every child to shut down (SIGTERM) and waits for
// them, killing those still running after grace.
func (s *supervisor) stop(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range s.children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.resume(c)
			procutil.Stop(c.cmd.Process, c.done, grace)
		}()
	}
	wg.Wait()
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// lockedWriter serialises the children's lines onto one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineWriter copies a child's output line by line with a prefix, and reports the address of
// its "listening" line once.
type lineWriter struct {
	prefix string
	out    io.Writer
	addr   chan string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := w.buf[:i+1]
		if m := listeningLine.FindSubmatch(line); m != nil {
			select {
			case w.addr <- string(m[1]):
			default:
			}
		}
		_, _ = w.out.Write(append([]byte(w.prefix), line...))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
