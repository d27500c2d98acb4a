//go:build !nodemo

package lab

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/inventory"
)

// SupervisorConfig configures NewSupervisor.
type SupervisorConfig struct {
	// Executable is the storefront program each instance runs, and Args its arguments: they
	// must make it a --demo storefront listening on a free loopback port that logs its
	// "listening" line with addr=HOST:PORT (the supervisor reads the address from it), on
	// the supervisor's database, Redis and admin token. Env is added to the instances'
	// environment (this process's): the admin token goes there, never on a command line
	// that ps shows.
	Executable string
	Args       []string
	Env        []string
	// AdminToken is the instances' admin token; with RequireToken (a supervisor listening
	// beyond loopback) the lab's run, pause and reset, and the instances' lab routes and
	// profiles under /i/, take it.
	AdminToken   string
	RequireToken bool
	// Instances is how many storefront processes to start (at least one).
	Instances int
	// Redis is the instances' Redis: the supervisor confirms a lock holder in it before it
	// leaves the holder paused.
	Redis redis.UniversalClient
	// Lease is the instances' lock lease (shown by the page); PauseFor how long a paused
	// holder stays stopped (three leases, so that its lease runs out).
	Lease, PauseFor time.Duration
	// Output receives the instances' log lines, each prefixed with "instance=N ".
	Output io.Writer
	// Logger logs the supervisor's own events; Notice, when not nil, its start-up lines
	// (the storefront shows those whatever the log level). nil: slog.Default() and Logger.Info.
	Logger *slog.Logger
	Notice func(msg string, args ...any)
}

// Supervisor is the process of the lab over several storefronts: it starts them, serves the
// lab page and API with each instance's API under /i/<index>/ (a reverse proxy, so that the
// page talks to one origin, event streams included), and is the one that sends SIGSTOP and
// SIGCONT, since a process holding a lock cannot resume itself. The instances run in their
// own process group and die with the supervisor (SIGKILL on its death); Stop stops them.
//
//	GET  /, /static/*               the lab page
//	GET  /api/lab                   the instances, the lease, and that Pause is offered
//	POST /api/lab/run, /api/lab/carts, /api/lab/pause
//	ANY  /i/:index/*path            instance index's API (e.g. /i/0/api/events)
//	GET  /healthz
//	GET  /readyz                    200 when every instance answers its own /readyz with 200,
//	                                else 503 naming the instances that did not (a paused one)
type Supervisor struct {
	cfg      SupervisorConfig
	rdb      redis.UniversalClient
	pauseFor time.Duration
	log      *slog.Logger
	hc       *http.Client
	children []*child
	running  context.Context // Start's: it ends as shutdown begins, and the proxied event streams with it
}

// NewSupervisor returns a supervisor of cfg.Instances storefronts, none started yet.
func NewSupervisor(cfg SupervisorConfig) *Supervisor {
	logger := cmp.Or(cfg.Logger, slog.Default())
	if cfg.Notice == nil {
		cfg.Notice = logger.Info
	}
	if cfg.Output == nil {
		cfg.Output = io.Discard
	}
	return &Supervisor{cfg: cfg, rdb: cfg.Redis, pauseFor: cfg.PauseFor, log: logger, hc: &http.Client{Timeout: time.Second}}
}

// Handler returns the supervisor's HTTP handler (see Supervisor).
func (s *Supervisor) Handler() http.Handler {
	l := &api{sup: s, lease: s.cfg.Lease, hc: newLabClient(), guard: guardFor(s.cfg.RequireToken, s.cfg.AdminToken), local: handlers.LocalOnly()}
	r := handlers.NewEngine(s.log)
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.readyz)
	l.routes(r)
	handlers.ServePages(r, pages())
	r.Any("/i/:index/*path", l.proxy)
	return r
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

// Start starts the instances and waits until each one listens. An instance that exits later,
// while the supervisor still runs, cancels ctx with fail and the reason. Call Stop even when
// Start fails: it stops the instances already started.
func (s *Supervisor) Start(ctx context.Context, fail context.CancelCauseFunc) error {
	if s.cfg.Instances < 1 {
		return errors.New("supervisor: no instances to start")
	}
	s.running = ctx
	out := &lockedWriter{w: s.cfg.Output}
	for i := range s.cfg.Instances {
		addr := make(chan string, 1)
		cmd := exec.Command(s.cfg.Executable, s.cfg.Args...)
		cmd.Env = append(os.Environ(), s.cfg.Env...) // the last value of a name wins
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
		s.cfg.Notice("lab instance", "index", i, "pid", cmd.Process.Pid, "url", c.url)
	}
	return nil
}

// Instances lists the instances for the lab page.
func (s *Supervisor) Instances() []Instance {
	out := make([]Instance, len(s.children))
	for i, c := range s.children {
		out[i] = Instance{Index: i, PID: c.cmd.Process.Pid, Base: "/i/" + strconv.Itoa(i), URL: c.url}
	}
	return out
}

// Pause finds the child holding item's lock (asking each running child's /api/debug/locks),
// stops it with SIGSTOP, confirms in Redis that the lock is still its own (else continues it
// and looks again), and continues it with SIGCONT after pauseFor.
func (s *Supervisor) Pause(ctx context.Context, itemID int64) (Paused, error) {
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
			return Paused{}, fmt.Errorf("%w: SIGSTOP instance %d: %w", inventory.ErrUnavailable, c.index, err)
		}
		if !s.stillHeld(ctx, held) {
			_ = c.cmd.Process.Signal(syscall.SIGCONT) // it released between the look-up and the stop
			c.mu.Unlock()
			continue
		}
		at := time.Now()
		c.paused = time.AfterFunc(s.pauseFor, func() { s.resume(c) })
		c.mu.Unlock()
		s.log.Info("lab: paused a lock holder", "instance", c.index, "pid", c.cmd.Process.Pid, "item", itemID, "token", held.Token, "for", s.pauseFor)
		return Paused{Instance: c.index, PID: c.cmd.Process.Pid, Token: held.Token, AtMS: unixMS(at), ForMS: float64(s.pauseFor.Milliseconds())}, nil
	}
	return Paused{}, fmt.Errorf("%w: item %d", ErrNotHeld, itemID)
}

// holder returns a running child that holds item's lock, and the lock (the first of the
// children, in their order, that says so on /api/debug/locks).
func (s *Supervisor) holder(ctx context.Context, itemID int64) (*child, storeapi.HeldLock, bool) {
	var running []*child
	var bases []string
	for _, c := range s.children {
		c.mu.Lock()
		paused := c.paused != nil
		c.mu.Unlock()
		if !paused { // a stopped process would not answer
			running = append(running, c)
			bases = append(bases, c.url)
		}
	}
	h, ok := storeapi.FindHolder(ctx, s.hc, bases, itemID)
	if !ok {
		return nil, storeapi.HeldLock{}, false
	}
	return running[h.Index], h.Lock, true
}

// stillHeld tells whether Redis still shows the lock held as held (its key exists and its
// token is the last fencing token issued).
func (s *Supervisor) stillHeld(ctx context.Context, held storeapi.HeldLock) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return storeapi.StillHeld(ctx, s.rdb, held)
}

// resume sends SIGCONT to a paused child.
func (s *Supervisor) resume(c *child) {
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

// Stop continues any paused instance, asks every instance to shut down (SIGTERM) and waits
// for them, killing those still running after grace.
func (s *Supervisor) Stop(grace time.Duration) {
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
