package main

import (
	"os/exec"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/redisproc"
)

// redisServer is the Redis shared by the instances of a self-contained run: a redis-server child
// when one is on PATH, else an in-process miniredis whose TTLs a ticker advances in real time.
type redisServer struct {
	Kind string // "redis-server" or "miniredis"
	URL  string
	Addr string
	PID  int // redis-server child; 0 for miniredis

	srv *redisproc.Server
}

func startRedis() (*redisServer, error) {
	var (
		srv *redisproc.Server
		err error
	)
	if path, lerr := exec.LookPath("redis-server"); lerr == nil {
		srv, err = redisproc.StartChild(path, 0)
	} else {
		srv, err = redisproc.StartMemory()
	}
	if err != nil {
		return nil, err
	}
	return &redisServer{Kind: srv.Kind, URL: srv.URL(), Addr: srv.Addr, PID: srv.PID, srv: srv}, nil
}

// Client returns a go-redis client for s (the chaos mode reads the lock keys with it).
func (s *redisServer) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
}

// Close stops the server and waits for it.
func (s *redisServer) Close() { s.srv.Kill() }
