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
	// beyond loopback) the lab's routes that act (run, carts, pause, kill, lease, takeover),
	// and the instances' lab routes and profiles under /i/, take it.
	AdminToken   string
	RequireToken bool
	// Instances is how many storefront processes to start (at least one).
	Instances int
	// Redis is the instances' Redis: the supervisor confirms a lock holder in it before it
	// leaves the holder paused.
	Redis redis.UniversalClient
	// Lease is the instances' lock lease (shown by the page) as Args give it, and LockWait
	// their lock wait; PauseFor how long a paused holder stays stopped (three leases, so that
	// its lease runs out). SetLease starts the instances again with another lease.
	Lease, LockWait, PauseFor time.Duration
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
//	POST /api/lab/run, /api/lab/carts, /api/lab/pause, /api/lab/kill, /api/lab/lease, /api/lab/takeover
//	ANY  /i/:index/*path            instance index's API (e.g. /i/0/api/events)
//	GET  /healthz
//	GET  /readyz                    200 when every instance answers its own /readyz with 200,
//	                                else 503 naming the instances that did not (a paused one)
type Supervisor struct {
	cfg      SupervisorConfig
	rdb      redis.UniversalClient
	log      *slog.Logger
	hc       *http.Client
	children []*child        // set by Start
	running  context.Context // Start's: it ends as shutdown begins, and the proxied event streams with it
	fail     context.CancelCauseFunc
	out      *lockedWriter
	relaunch sync.Mutex // one change of lease at a time (lease.go)

	mu       sync.Mutex
	stopping bool          // Stop has begun: no instance starts
	lease    time.Duration // the instances' lease now (SetLease)
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
	return &Supervisor{cfg: cfg, rdb: cfg.Redis, lease: cfg.Lease, log: logger, hc: &http.Client{Timeout: time.Second}}
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

// child is one storefront process, and the processes that replace it: an instance that exits
// while the supervisor runs is started again with the same arguments and environment.
type child struct {
	index   int
	mu      sync.Mutex
	cmd     *exec.Cmd
	url     string        // "" while it starts
	done    chan struct{} // closed once cmd's process has exited
	ready   chan struct{} // closed once it listens (url is set)
	started time.Time
	// expected: the lab ended this process itself (kill -9, a restart with a new lease): its
	// exit is restarted whenever it comes.
	expected bool
	paused   *time.Timer // set while SIGSTOPped: fires the SIGCONT
}

// proc returns the child's current process, its exit channel and its URL.
func (c *child) proc() (*exec.Cmd, chan struct{}, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd, c.done, c.url
}

var listeningLine = regexp.MustCompile(`msg="?listening"?\s.*?\baddr=(\S+)`)

// minUptime: an instance that exits on its own sooner than this after its start is not
// restarted (a storefront that cannot run would be restarted forever); the supervisor stops.
const minUptime = 5 * time.Second

// errStopping: the supervisor is stopping, no instance starts.
var errStopping = errors.New("supervisor: stopping")

// Start starts the instances and waits until each one listens. An instance that exits later,
// while the supervisor still runs, is started again with the same arguments and environment;
// one that exits on its own within minUptime of its start, or cannot be started again,
// cancels ctx with fail and the reason. Call Stop even when Start fails: it stops the
// instances already started.
func (s *Supervisor) Start(ctx context.Context, fail context.CancelCauseFunc) error {
	if s.cfg.Instances < 1 {
		return errors.New("supervisor: no instances to start")
	}
	s.running, s.fail = ctx, fail
	s.out = &lockedWriter{w: s.cfg.Output}
	for i := range s.cfg.Instances {
		c := &child{index: i}
		err := s.launch(c)
		if cmd, _, _ := c.proc(); cmd != nil { // started: Stop stops it, even when it did not listen
			s.children = append(s.children, c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// launch starts c's process with the supervisor's current arguments (args), and waits until
// it listens. A goroutine waits for the process: when it exits while the supervisor runs, it
// starts the next one (exited).
func (s *Supervisor) launch(c *child) error {
	addr := make(chan string, 1)
	cmd := exec.Command(s.cfg.Executable, s.args()...)
	cmd.Env = append(os.Environ(), s.cfg.Env...) // the last value of a name wins
	cmd.Stdout = &lineWriter{prefix: "instance=" + strconv.Itoa(c.index) + " ", out: s.out, addr: addr}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	done, ready := make(chan struct{}), make(chan struct{})
	s.mu.Lock() // Stop's stopping and this start are ordered: nothing starts after Stop
	if s.stopping {
		s.mu.Unlock()
		return errStopping
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("supervisor: start instance %d: %w", c.index, err)
	}
	c.mu.Lock()
	c.cmd, c.done, c.ready, c.url, c.started, c.expected = cmd, done, ready, "", time.Now(), false
	c.mu.Unlock()
	s.mu.Unlock()
	go func() { // owner: the supervisor; ends when the process exits (Stop makes sure), and its successor listens
		err := cmd.Wait()
		close(done)
		s.exited(c, cmd, err)
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
		c.mu.Lock()
		c.url = url
		c.mu.Unlock()
		close(ready)
	case <-done:
		return fmt.Errorf("supervisor: instance %d exited during start-up (see its log above)", c.index)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("supervisor: instance %d did not listen within 30s", c.index)
	case <-s.running.Done():
		return context.Cause(s.running)
	}
	s.cfg.Notice("lab instance", "index", c.index, "pid", cmd.Process.Pid, "url", url, "lease", s.Lease())
	return nil
}

// exited follows the exit of c's process cmd: unless the supervisor stops, the instance is
// started again; an unexpected exit within minUptime of its start, or a failed start, stops
// the supervisor (fail).
func (s *Supervisor) exited(c *child, cmd *exec.Cmd, err error) {
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping || s.running.Err() != nil {
		return
	}
	c.mu.Lock()
	current, expected, up := c.cmd == cmd, c.expected, time.Since(c.started)
	c.mu.Unlock()
	if !current {
		return
	}
	if !expected && up < minUptime {
		s.fail(fmt.Errorf("lab instance %d exited %s after its start: %v (not restarted)", c.index, up.Round(time.Millisecond), err))
		return
	}
	s.log.Warn("lab: instance exited; starting it again", "instance", c.index, "pid", cmd.Process.Pid, "exit", fmt.Sprint(err), "by_the_lab", expected)
	if err := s.launch(c); err != nil && !errors.Is(err, errStopping) && s.running.Err() == nil {
		s.fail(fmt.Errorf("lab instance %d exited and could not be started again: %w", c.index, err))
	}
}

// Instances lists the instances for the lab page.
func (s *Supervisor) Instances() []Instance {
	out := make([]Instance, len(s.children))
	for i, c := range s.children {
		cmd, _, url := c.proc()
		out[i] = Instance{Index: i, PID: cmd.Process.Pid, Base: "/i/" + strconv.Itoa(i), URL: url}
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
		proc := c.cmd.Process
		if err := proc.Signal(syscall.SIGSTOP); err != nil {
			c.mu.Unlock()
			return Paused{}, fmt.Errorf("%w: SIGSTOP instance %d: %w", inventory.ErrUnavailable, c.index, err)
		}
		if _, ok := s.leaseLeft(ctx, held, proc.Pid); !ok {
			_ = proc.Signal(syscall.SIGCONT) // it released between the look-up and the stop
			c.mu.Unlock()
			continue
		}
		at := time.Now()
		pauseFor := s.pauseFor()
		c.paused = time.AfterFunc(pauseFor, func() { s.resume(c) })
		c.mu.Unlock()
		s.log.Info("lab: paused a lock holder", "instance", c.index, "pid", proc.Pid, "item", itemID, "token", held.Token, "for", pauseFor)
		return Paused{Instance: c.index, PID: proc.Pid, Token: held.Token, AtMS: unixMS(at), ForMS: float64(pauseFor.Milliseconds())}, nil
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
		paused, url := c.paused != nil, c.url
		c.mu.Unlock()
		if !paused && url != "" { // a stopped process would not answer; one starting holds nothing
			running = append(running, c)
			bases = append(bases, url)
		}
	}
	h, ok := storeapi.FindHolder(ctx, s.hc, bases, itemID)
	if !ok {
		return nil, storeapi.HeldLock{}, false
	}
	return running[h.Index], h.Lock, true
}

// leaseLeft tells whether Redis still shows the lock held as held (its key exists and its
// token is the last fencing token issued), and how long its lease has left. Its holders' pids,
// just sent SIGSTOP, are waited for until every thread is stopped, and Redis is settled
// (storeapi.Settle): a release a holder wrote before it stopped runs before the question,
// not after it (false: not stopped, or the lock is no longer held as held).
func (s *Supervisor) leaseLeft(ctx context.Context, held storeapi.HeldLock, pids ...int) (time.Duration, bool) {
	for _, pid := range pids {
		if !procutil.WaitStopped(pid, 2*time.Second) {
			return 0, false
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if storeapi.Settle(ctx, s.rdb) != nil {
		return 0, false
	}
	return storeapi.LeaseLeft(ctx, s.rdb, held)
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
	s.log.Info("lab: resumed", "instance", c.index, "pid", c.cmd.Process.Pid)
}

// Stop continues any paused instance, asks every instance to shut down (SIGTERM) and waits
// for them, killing those still running after grace. No instance starts again after it.
func (s *Supervisor) Stop(grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range s.children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.resume(c)
			cmd, done, _ := c.proc()
			procutil.Stop(cmd.Process, done, grace)
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
