package redisproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelSet is one master, its replicas and a quorum of Sentinels, every one a redis-server
// child on loopback, monitoring the master under MasterName.
type SentinelSet struct {
	MasterName string
	Master     *Server   // the master at start (after a failover, a replica is the master)
	Replicas   []*Server // replicas of Master at start
	Sentinels  []*Server
}

// SentinelConfig tunes a Sentinel set; zero values take the defaults.
type SentinelConfig struct {
	MasterName      string        // default "stockguard"
	Replicas        int           // default 1
	Sentinels       int           // default 3
	Quorum          int           // default Sentinels/2+1
	DownAfter       time.Duration // sentinel down-after-milliseconds; default 500ms
	FailoverTimeout time.Duration // sentinel failover-timeout; default 2s
}

// StartSentinelSet starts a master (repl-diskless-sync with no delay, so a replica syncs at
// once), its replicas (replicaof the master) and the Sentinels (redis-server <conf>
// --sentinel) from the binary at path, and waits until every replica is in sync and every
// Sentinel knows the master, its replicas and the other Sentinels.
func StartSentinelSet(path string, cfg SentinelConfig) (s *SentinelSet, err error) {
	if cfg.MasterName == "" {
		cfg.MasterName = "stockguard"
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Sentinels <= 0 {
		cfg.Sentinels = 3
	}
	if cfg.Quorum <= 0 {
		cfg.Quorum = cfg.Sentinels/2 + 1
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = 500 * time.Millisecond
	}
	if cfg.FailoverTimeout <= 0 {
		cfg.FailoverTimeout = 2 * time.Second
	}
	s = &SentinelSet{MasterName: cfg.MasterName}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	repl := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-timeout", "5"}
	if s.Master, err = StartChildWith(path, 0, "", repl...); err != nil {
		return s, err
	}
	mhost, mport := splitAddr(s.Master.Addr)
	for i := 0; i < cfg.Replicas; i++ {
		r, err := StartChildWith(path, 0, "", append([]string{"--replicaof", mhost, mport}, repl...)...)
		if err != nil {
			return s, err
		}
		s.Replicas = append(s.Replicas, r)
	}
	conf := fmt.Sprintf("port %%d\nbind 127.0.0.1\nprotected-mode no\ndir %%s\n"+
		"sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s %d\n"+
		"sentinel parallel-syncs %s 1\n",
		cfg.MasterName, mhost, mport, cfg.Quorum,
		cfg.MasterName, cfg.DownAfter.Milliseconds(),
		cfg.MasterName, cfg.FailoverTimeout.Milliseconds(), cfg.MasterName)
	for i := 0; i < cfg.Sentinels; i++ {
		sn, err := startSentinel(path, conf)
		if err != nil {
			return s, err
		}
		s.Sentinels = append(s.Sentinels, sn)
		// INFO every second, not every 10s: a Sentinel learns the replicas of a master, and a
		// replica's role and link, only from INFO, so after a failover or a Rejoin it would
		// otherwise see a (re)joined replica up to 10s late. Sentinel itself uses 1s during a
		// failover. SENTINEL DEBUG exists since Redis 7.0.
		if err := withClient(sn.Addr, func(rdb *redis.Client) error {
			return rdb.Do(context.Background(), "SENTINEL", "DEBUG", "info-period", 1000).Err()
		}); err != nil {
			return s, fmt.Errorf("redisproc: sentinel %s: SENTINEL DEBUG info-period: %w", sn.Addr, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupLimit)
	defer cancel()
	err = withClient(s.Master.Addr, func(rdb *redis.Client) error {
		return poll(ctx, func() (bool, error) {
			info, err := rdb.Info(ctx, "replication").Result()
			return err == nil && strings.Count(info, "state=online") == cfg.Replicas, err
		})
	})
	if err != nil {
		return s, fmt.Errorf("redisproc: replicas of %s not in sync: %w", s.Master.Addr, err)
	}
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
		err := poll(ctx, func() (bool, error) {
			f, err := sc.Master(ctx, cfg.MasterName).Result()
			return err == nil && f["num-slaves"] == strconv.Itoa(cfg.Replicas) &&
				f["num-other-sentinels"] == strconv.Itoa(cfg.Sentinels-1), err
		})
		_ = sc.Close()
		if err != nil {
			return s, fmt.Errorf("redisproc: sentinel %s did not learn the set: %w", sn.Addr, err)
		}
	}
	return s, nil
}

// startSentinel runs redis-server in Sentinel mode with conf (which needs a writable file:
// Sentinel rewrites it).
func startSentinel(path, conf string) (*Server, error) {
	return StartChildWith(path, 0, conf, "--sentinel")
}

// SentinelAddrs returns every Sentinel's host:port.
func (s *SentinelSet) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// URL returns the set in go-redis's ParseFailoverURL form:
// redis://sentinel1?master_name=NAME&addr=sentinel2&addr=sentinel3.
func (s *SentinelSet) URL() string {
	u := "redis://" + s.Sentinels[0].Addr + "?master_name=" + s.MasterName
	for _, sn := range s.Sentinels[1:] {
		u += "&addr=" + sn.Addr
	}
	return u
}

// MasterAddr asks the Sentinels which address they give for the master now (the first that
// answers wins).
func (s *SentinelSet) MasterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, sn := range s.Sentinels {
		var addr string
		err := withClient(sn.Addr, func(rdb *redis.Client) error {
			a, err := rdb.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName).StringSlice()
			if err == nil && len(a) == 2 {
				addr = a[0] + ":" + a[1]
			}
			return err
		})
		if err == nil && addr != "" {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("redisproc: no sentinel names the master: %w", errors.Join(errs...))
}

// Close stops the Sentinels, then the replicas and the master.
func (s *SentinelSet) Close() {
	for _, sn := range s.Sentinels {
		sn.Kill()
	}
	for _, r := range s.Replicas {
		r.Kill()
	}
	if s.Master != nil {
		s.Master.Kill()
	}
}
