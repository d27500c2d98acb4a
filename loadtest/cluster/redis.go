package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/redisproc"
)

// RedisServer is the Redis shared by the instances of a self-contained run: a redis-server child
// when one is on PATH, else an in-process miniredis whose TTLs a ticker advances in real time.
type RedisServer struct {
	Kind string // "redis-server" or "miniredis"
	URL  string
	Addr string
	PID  int // redis-server child; 0 for miniredis

	path string
	opts redisproc.ChildOptions
	srv  *redisproc.Server
}

// startRedis starts the run's Redis. With dir it must be a redis-server, whose SAVE and BGSAVE
// write dir/dump.rdb and which RestartFromSnapshot restarts from it; with env too (its
// environment on top of this process's: -chaos clock).
func startRedis(dir string, env ...string) (*RedisServer, error) {
	var (
		srv *redisproc.Server
		err error
	)
	path, lerr := exec.LookPath("redis-server")
	opts := redisproc.ChildOptions{Dir: dir, Env: env}
	switch {
	case lerr == nil:
		srv, err = redisproc.StartChildOpts(path, 0, opts)
	case len(env) > 0:
		return nil, errors.New("-chaos clock changes the clock of a redis-server: it needs redis-server on PATH (apt-get install redis-server)")
	case dir != "":
		return nil, errors.New("this scenario restarts Redis from a snapshot: it needs redis-server on PATH (apt-get install redis-server)")
	default:
		srv, err = redisproc.StartMemory()
	}
	if err != nil {
		return nil, err
	}
	return &RedisServer{Kind: srv.Kind, URL: srv.URL(), Addr: srv.Addr, PID: srv.PID, path: path, opts: opts, srv: srv}, nil
}

// RestartFromSnapshot kills the redis-server (SIGKILL: nothing saved) and starts a new one on
// the same port and directory, which loads the last snapshot: what a crashed Redis remembers.
func (s *RedisServer) RestartFromSnapshot() error {
	if s.opts.Dir == "" {
		return errors.New("restart from snapshot: Redis was not started with a directory")
	}
	return s.restart(false)
}

// RestartEmpty kills the redis-server (SIGKILL) and starts a new one on the same port with
// nothing loaded: its snapshot, if any, is deleted first (the same environment: a shimmed
// clock keeps its offset).
func (s *RedisServer) RestartEmpty() error { return s.restart(true) }

// restart kills the redis-server and starts it again on its port (empty: without a snapshot).
func (s *RedisServer) restart(empty bool) error {
	if s.srv == nil || s.srv.Kind != redisproc.KindChild {
		return errors.New("restart: Redis is not a redis-server")
	}
	s.srv.Kill()
	opts := s.opts
	if empty && opts.Dir != "" {
		name := opts.DBFilename
		if name == "" {
			name = "dump.rdb"
		}
		if err := os.Remove(filepath.Join(opts.Dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the old socket may linger briefly
		var srv *redisproc.Server
		if srv, err = redisproc.StartChildOpts(s.path, p, opts); err == nil {
			s.srv, s.PID = srv, srv.PID
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("restart redis-server on %s: %w", s.Addr, err)
}

// Client returns a go-redis client for s (the chaos mode reads the lock keys with it).
func (s *RedisServer) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
}

// Signal sends sig to the redis-server (-chaos redis-hang: SIGSTOP, then SIGCONT).
func (s *RedisServer) Signal(sig syscall.Signal) error { return s.srv.Signal(sig) }

// Close stops the server and waits for it.
func (s *RedisServer) Close() { s.srv.Kill() }
