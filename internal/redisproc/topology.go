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

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// setupLimit bounds the wait for a cluster or a Sentinel set to settle.
const setupLimit = 20 * time.Second

// Cluster is a Redis Cluster of masters only (no replicas), every node a redis-server child on
// loopback, created by hand: CLUSTER ADDSLOTSRANGE on each node (an equal share of the 16384
// slots), CLUSTER MEET to the first, then a wait until every node reports cluster_state:ok
// and knows every node. redis-cli is not needed.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts masters (at least 3, as Redis Cluster wants) cluster-enabled
// redis-server children from the binary at path and joins them into one cluster. The nodes
// use a short cluster-node-timeout (1s) so that tests see failures quickly.
func StartCluster(path string, masters int) (c *Cluster, err error) {
	if masters < 3 {
		return nil, fmt.Errorf("redisproc: a cluster needs at least 3 masters, asked %d", masters)
	}
	c = &Cluster{}
	var busPorts []int
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := 0; i < masters; i++ {
		busPort, err := FreePort() // port+10000 may be beyond 65535: name the bus port
		if err != nil {
			return c, err
		}
		s, err := StartChildWith(path, 0, "", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-%d.conf", "--cluster-node-timeout", "1000",
			"--cluster-port", strconv.Itoa(busPort))
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, s)
		busPorts = append(busPorts, busPort)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupLimit)
	defer cancel()
	per := clusterSlots / masters
	first := c.Nodes[0]
	host, port := splitAddr(first.Addr)
	for i, s := range c.Nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = clusterSlots - 1
		}
		err := withClient(s.Addr, func(rdb *redis.Client) error {
			if err := rdb.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
				return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d: %w", lo, hi, err)
			}
			if i > 0 {
				// The bus port is not port+10000: MEET must name it.
				if err := rdb.Do(ctx, "CLUSTER", "MEET", host, port, busPorts[0]).Err(); err != nil {
					return fmt.Errorf("CLUSTER MEET: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return c, fmt.Errorf("redisproc: cluster node %s: %w", s.Addr, err)
		}
	}
	for _, s := range c.Nodes {
		var info string
		err := withClient(s.Addr, func(rdb *redis.Client) error {
			return poll(ctx, func() (bool, error) {
				var err error
				if info, err = rdb.ClusterInfo(ctx).Result(); err != nil {
					return false, err
				}
				return strings.Contains(info, "cluster_state:ok") &&
					strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(masters)+"\r\n") &&
					strings.Contains(info, "cluster_slots_ok:16384"), nil
			})
		})
		if err != nil {
			return c, fmt.Errorf("redisproc: cluster node %s did not settle: %w (CLUSTER INFO: %q)", s.Addr, err, info)
		}
	}
	return c, nil
}

// Addrs returns every node's host:port.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// URL returns the cluster in go-redis's ParseClusterURL form:
// redis://first?addr=second&addr=third...
func (c *Cluster) URL() string {
	u := "redis://" + c.Nodes[0].Addr
	for i, s := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr
	}
	return u
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, s := range c.Nodes {
		s.Kill()
	}
}

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

// withClient runs fn with a short-lived client of addr.
func withClient(addr string, fn func(rdb *redis.Client) error) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
	defer rdb.Close()
	return fn(rdb)
}

// poll calls ok every 20ms until it reports true or ctx ends; the last error is returned then.
func poll(ctx context.Context, ok func() (bool, error)) error {
	var last error
	for {
		done, err := ok()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return last
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// ErrOf returns the error of a (value, error) pair, and stops the value when there is one, so
// that a call expected to fail can be checked in one line: assert.Error(t, ErrOf(Start...)).
func ErrOf[T interface{ Close() }](v T, err error) error {
	if err == nil {
		v.Close()
	}
	return err
}

// Rejoin brings the set back to one master with in-sync replicas after a failover that killed
// the master: it asks the Sentinels for the current master, restarts every exited server of
// the set (empty) on its own port as a replica of it, sets Master and Replicas to the roles as
// they are now, and waits until the replicas are in sync and every Sentinel names the master
// and sees every replica up. A set that had no failover is left as it is.
func (s *SentinelSet) Rejoin(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupLimit)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return err
	}
	all := append([]*Server{s.Master}, s.Replicas...)
	var master *Server
	var replicas []*Server
	mhost, mport := splitAddr(addr)
	for i, srv := range all {
		if srv.Addr == addr && !srv.Exited() {
			master = srv
			continue
		}
		if srv.Exited() {
			srv.Kill() // reap it and remove its directory
			_, port := splitAddr(srv.Addr)
			p, _ := strconv.Atoi(port)
			var fresh *Server
			for attempt := 0; attempt < 50; attempt++ { // the old socket may linger briefly
				fresh, err = StartChildWith(srv.cmd.Path, p, "", "--replicaof", mhost, mport,
					"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-timeout", "5")
				if err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("redisproc: rejoin %s: %w", srv.Addr, err)
			}
			all[i], srv = fresh, fresh
		}
		replicas = append(replicas, srv)
	}
	if master == nil {
		return fmt.Errorf("redisproc: the sentinels name %s, which is not a running server of the set", addr)
	}
	s.Master, s.Replicas = master, replicas
	err = withClient(master.Addr, func(rdb *redis.Client) error {
		return poll(ctx, func() (bool, error) {
			info, err := rdb.Info(ctx, "replication").Result()
			return err == nil && strings.Count(info, "state=online") == len(replicas), err
		})
	})
	if err != nil {
		return fmt.Errorf("redisproc: replicas of %s not in sync: %w", master.Addr, err)
	}
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
		err := poll(ctx, func() (bool, error) {
			a, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
			if err != nil || len(a) != 2 || a[0]+":"+a[1] != master.Addr {
				return false, err
			}
			reps, err := sc.Replicas(ctx, s.MasterName).Result()
			if err != nil {
				return false, err
			}
			up := 0
			for _, r := range reps {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					up++
				}
			}
			return up == len(replicas), nil
		})
		_ = sc.Close()
		if err != nil {
			return fmt.Errorf("redisproc: sentinel %s does not see the set rejoined: %w", sn.Addr, err)
		}
	}
	return nil
}
