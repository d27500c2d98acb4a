// Package redisproc starts a Redis for a process's own use: a redis-server child process on a
// loopback port with no persistence, or an in-process miniredis whose TTLs follow real time.
// The storefront uses it when no --redis URL is given, the load test for its self-contained
// runs, and internal/redistest for tests.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/procutil"
)

// Kinds of Server.
const (
	KindChild  = "redis-server" // a redis-server child process
	KindMemory = "miniredis"    // an in-process miniredis
)

// MemoryTick is how often an in-process Redis's clock is moved to real time: the resolution
// of its TTLs (miniredis only expires keys when its clock is moved).
const MemoryTick = 25 * time.Millisecond

// readyLimit bounds the wait for a started redis-server to answer PING.
const readyLimit = 10 * time.Second

// Server is a Redis started by this process. Close stops it; nothing it started outlives Close.
type Server struct {
	Kind string // KindChild or KindMemory
	Addr string // 127.0.0.1:port
	PID  int    // the child's process id; 0 for KindMemory

	// KindChild
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
	out    *procutil.LimitedBuffer

	// KindMemory
	mini *miniredis.Miniredis
	tick chan struct{}
	wg   sync.WaitGroup

	once sync.Once
}

// URL returns the server as a redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// StartChild starts the redis-server binary at path (no RDB, no AOF, bound to 127.0.0.1) on
// port, or on a free port when port is 0, and waits until it answers PING. The child runs in
// its own process group (a terminal's Ctrl-C reaches only this process, which then stops it
// in order) and is killed if this process dies (Pdeathsig). It returns an error naming the
// server's output when it does not come up.
func StartChild(path string, port int) (*Server, error) {
	return StartChildWith(path, port, "")
}

// StartChildWith is StartChild with a configuration: conf, when not empty, is the text of a
// redis.conf written to the server's own directory and passed first (a Sentinel needs a
// writable config file: run it with conf holding "sentinel monitor ..." and extra holding
// "--sentinel"); extra are further command-line options, after the defaults. A "%d" in conf
// or extra is replaced by the server's port, "%s" in conf by its directory.
func StartChildWith(path string, port int, conf string, extra ...string) (*Server, error) {
	return StartChildOpts(path, port, ChildOptions{Conf: conf, Extra: extra})
}

// ChildOptions change how StartChildOpts starts a redis-server.
type ChildOptions struct {
	// Conf and Extra: as StartChildWith's conf and extra.
	Conf  string
	Extra []string
	// Dir, when set, is the server's working directory, where SAVE and BGSAVE write the RDB
	// file and where a start loads it from. It is kept when the server stops (a new server
	// started with the same Dir restarts from the last snapshot). Default: a temporary
	// directory removed on stop.
	Dir string
	// DBFilename is the RDB file's name in Dir; default "dump.rdb".
	DBFilename string
	// Env holds environment variables (KEY=value) the server gets on top of this process's
	// own, e.g. an LD_PRELOAD that changes its clock.
	Env []string
}

// StartChildOpts is StartChild with options. Automatic snapshots stay off (no save points, no
// AOF) either way: only an explicit SAVE or BGSAVE writes the RDB file.
func StartChildOpts(path string, port int, o ChildOptions) (*Server, error) {
	attempts := 1
	if port == 0 {
		attempts = 5 // a probed free port may be taken before redis-server binds it
	}
	var err error
	for i := 0; i < attempts; i++ {
		p := port
		if p == 0 {
			if p, err = FreePort(); err != nil {
				return nil, err
			}
		}
		var s *Server
		if s, err = startChild(path, p, o); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func startChild(path string, port int, o ChildOptions) (*Server, error) {
	dir, tmp := o.Dir, ""
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "redisproc-*"); err != nil {
			return nil, fmt.Errorf("redisproc: temp dir: %w", err)
		}
		tmp = dir
	}
	removeTmp := func() {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}
	if o.DBFilename == "" {
		o.DBFilename = "dump.rdb"
	}
	out := &procutil.LimitedBuffer{Max: 4 << 10}
	var args []string
	if o.Conf != "" {
		file := filepath.Join(dir, "redis.conf")
		text := strings.ReplaceAll(strings.ReplaceAll(o.Conf, "%d", strconv.Itoa(port)), "%s", dir)
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			removeTmp()
			return nil, fmt.Errorf("redisproc: write config: %w", err)
		}
		args = append(args, file)
	}
	args = append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--dbfilename", o.DBFilename,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", "")
	for _, a := range o.Extra {
		args = append(args, strings.ReplaceAll(a, "%d", strconv.Itoa(port)))
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		removeTmp()
		return nil, fmt.Errorf("redisproc: start %s: %w", path, err)
	}
	s := &Server{Kind: KindChild, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		PID: cmd.Process.Pid, cmd: cmd, dir: tmp, exited: make(chan struct{}), out: out}
	go func() { _ = cmd.Wait(); close(s.exited) }() // owner: s; Close waits for it
	if err := s.waitReady(readyLimit); err != nil {
		s.Kill()
		return nil, fmt.Errorf("redisproc: redis-server on %s: %w (output: %q)", s.Addr, err, out.String())
	}
	return s, nil
}

func (s *Server) waitReady(limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	defer c.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		// The answer must come from our child: when the port was taken, another server
		// answers while the child exits.
		if err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(s.PID)+"\r\n") {
			return nil
		}
		if err == nil {
			err = errors.New("another server answers on the port")
		}
		select {
		case <-s.exited:
			return errors.New("exited during start-up (port taken?)")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %s: %w", limit, err)
		}
	}
}

// StartMemory starts an in-process miniredis on a free loopback port, with a ticker that
// moves its clock with real time every MemoryTick so that TTLs expire as in a real Redis.
func StartMemory() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("redisproc: start in-process redis: %w", err)
	}
	s := &Server{Kind: KindMemory, Addr: m.Addr(), mini: m, tick: make(chan struct{})}
	s.wg.Add(1)
	go s.advance() // owner: s; Close stops it and waits
	return s, nil
}

func (s *Server) advance() {
	defer s.wg.Done()
	t := time.NewTicker(MemoryTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.tick:
			return
		case now := <-t.C:
			s.mini.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Signal sends sig to a child (SIGSTOP and SIGCONT pause and resume it); it returns an
// error for an in-process server.
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil {
		return errors.New("redisproc: an in-process server takes no signals")
	}
	return s.cmd.Process.Signal(sig)
}

// Exited reports whether a child has exited (killed by a signal, or stopped by Close or
// Kill); an in-process server never exits on its own.
func (s *Server) Exited() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// Close stops the server and waits for it: a child gets SIGTERM (after SIGCONT, in case it
// is paused), then SIGKILL if it has not exited within 3s; its directory is removed.
func (s *Server) Close() { s.stop(3 * time.Second) }

// Kill stops the server at once (SIGKILL for a child) and waits for it.
func (s *Server) Kill() { s.stop(0) }

func (s *Server) stop(grace time.Duration) {
	s.once.Do(func() {
		if s.cmd != nil {
			procutil.Stop(s.cmd.Process, s.exited, grace)
			if s.dir != "" { // a temporary directory; a kept ChildOptions.Dir stays
				_ = os.RemoveAll(s.dir)
			}
		}
		if s.mini != nil {
			close(s.tick)
			s.wg.Wait()
			s.mini.Close()
		}
	})
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	port, err := procutil.FreePort()
	if err != nil {
		return 0, fmt.Errorf("redisproc: %w", err)
	}
	return port, nil
}
