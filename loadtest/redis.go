package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisServer is the Redis shared by the instances of a self-contained run: a redis-server child
// when one is on PATH, else an in-process miniredis whose TTLs a ticker advances in real time.
type redisServer struct {
	Kind string // "redis-server" or "miniredis"
	URL  string
	Addr string
	PID  int // redis-server child; 0 for miniredis

	cmd  *exec.Cmd
	done chan struct{}

	mini *miniredis.Miniredis
	stop chan struct{}
	wg   sync.WaitGroup
}

func startRedis() (*redisServer, error) {
	if _, err := exec.LookPath("redis-server"); err == nil {
		var lastErr error
		for attempt := 0; attempt < 5; attempt++ { // a probed free port may be taken meanwhile
			s, err := startRedisServer()
			if err == nil {
				return s, nil
			}
			lastErr = err
		}
		return nil, lastErr
	}
	return startMiniredis()
}

func startRedisServer() (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
		"--loglevel", "warning", "--logfile", "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{Kind: "redis-server", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	s.URL = "redis://" + s.Addr + "/0"
	go func() { _ = cmd.Wait(); close(s.done) }() // owner: s; Close kills and waits
	if err := s.waitPing(10 * time.Second); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *redisServer) waitPing(limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
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
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited during start-up", s.Addr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %s: %w", s.Addr, limit, err)
		}
	}
}

func startMiniredis() (*redisServer, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start in-process redis: %w", err)
	}
	s := &redisServer{Kind: "miniredis", Addr: m.Addr(), URL: "redis://" + m.Addr() + "/0",
		mini: m, stop: make(chan struct{})}
	s.wg.Add(1)
	go func() { // owner: s; Close stops it and waits
		defer s.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last)) // miniredis TTLs only move when told to
				last = now
			}
		}
	}()
	return s, nil
}

// Client returns a go-redis client for s (the chaos mode reads the lock keys with it).
func (s *redisServer) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
}

// Close stops the server and waits for it.
func (s *redisServer) Close() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	if s.mini != nil {
		close(s.stop)
		s.wg.Wait()
		s.mini.Close()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
