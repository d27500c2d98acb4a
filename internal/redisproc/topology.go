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
// the master: it restarts every exited server of the set (empty) on its own port as a replica
// of the master the Sentinels name, and waits until the set has settled, then sets Master and
// Replicas to the roles as they are then. A set that had no failover is left as it is.
//
// Settled means: every Sentinel names the same master, a running server of the set that
// reports role:master; every other server is its replica with the link up (state=online at
// the master); and every Sentinel lists each replica as a healthy replica of that master. The
// condition is read anew on every round, so Rejoin follows the Sentinels should they fail over
// once more meanwhile (on a busy machine a Sentinel can miss the promoted master's PING replies
// for down-after-milliseconds right after the switch, and the other Sentinels' "master down"
// answers about the old master still count for its quorum). Rejoin does itself, at once, what
// the Sentinels would do only after seconds: a server that still claims role:master, or
// replicates another, is made a replica of the agreed master (REPLICAOF; Sentinel's
// convert-to-slave waits ~8s more). The Sentinels of a set send INFO every second (see
// StartSentinelSet), so they see the rejoined replica within about a second.
func (s *SentinelSet) Rejoin(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupLimit)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return err
	}
	all := append([]*Server{s.Master}, s.Replicas...)
	mhost, mport := splitAddr(addr)
	for i, srv := range all {
		if !srv.Exited() {
			continue
		}
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
		all[i] = fresh
	}
	clients := map[string]*redis.Client{}
	client := func(addr string) *redis.Client {
		if clients[addr] == nil {
			clients[addr] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
				ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
		}
		return clients[addr]
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	var why string
	err = poll(ctx, func() (bool, error) {
		var ok bool
		ok, why = s.settled(ctx, all, client)
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("redisproc: the set did not settle after the rejoin: %s: %w", why, err)
	}
	return nil
}

// settled makes one round of Rejoin's wait (see there): it reports whether the set has
// settled, and when it has, sets s.Master and s.Replicas; otherwise why it has not.
func (s *SentinelSet) settled(ctx context.Context, all []*Server, client func(string) *redis.Client) (bool, string) {
	// 1. Every Sentinel names the same master, a running server of the set.
	addr := ""
	for _, sn := range s.Sentinels {
		a, err := client(sn.Addr).Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName).StringSlice()
		if err != nil || len(a) != 2 {
			return false, fmt.Sprintf("sentinel %s names no master (%v)", sn.Addr, err)
		}
		if a[0]+":"+a[1] != addr && addr != "" {
			return false, fmt.Sprintf("the sentinels name %s and %s", addr, a[0]+":"+a[1])
		}
		addr = a[0] + ":" + a[1]
	}
	var master *Server
	var replicas []*Server
	for _, srv := range all {
		if srv.Addr == addr {
			master = srv
		} else {
			replicas = append(replicas, srv)
		}
	}
	if master == nil || master.Exited() {
		return false, fmt.Sprintf("the sentinels name %s, which is not a running server of the set", addr)
	}
	// 2. It is a master, and every other server replicates it with the link up.
	info, err := client(addr).Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		return false, fmt.Sprintf("%s is not a master yet (%v)", addr, err)
	}
	mhost, mport := splitAddr(addr)
	for _, r := range replicas {
		ri, err := client(r.Addr).Info(ctx, "replication").Result()
		if err != nil {
			return false, fmt.Sprintf("replica %s: %v", r.Addr, err)
		}
		if !strings.Contains(ri, "role:slave") || !strings.Contains(ri, "master_host:"+mhost+"\r\n") ||
			!strings.Contains(ri, "master_port:"+mport+"\r\n") {
			// A demoted master that still claims the role, or a replica of an old master.
			_ = client(r.Addr).Do(ctx, "REPLICAOF", mhost, mport).Err()
			return false, fmt.Sprintf("%s does not replicate %s yet: told REPLICAOF", r.Addr, addr)
		}
	}
	if n := strings.Count(info, "state=online"); n != len(replicas) {
		return false, fmt.Sprintf("%d of %d replicas of %s in sync", n, len(replicas), addr)
	}
	// 3. Every Sentinel lists each replica as a healthy replica of that master (it learns it
	// from INFO, every second: StartSentinelSet), and knows the other Sentinels.
	for _, sn := range s.Sentinels {
		sc := client(sn.Addr)
		m, err := sc.Do(ctx, "SENTINEL", "MASTER", s.MasterName).Result()
		if err != nil {
			return false, fmt.Sprintf("sentinel %s: %v", sn.Addr, err)
		}
		if f := fields(m); f["flags"] != "master" || f["num-other-sentinels"] != strconv.Itoa(len(s.Sentinels)-1) {
			return false, fmt.Sprintf("sentinel %s: master flags %q, %s other sentinels", sn.Addr,
				f["flags"], f["num-other-sentinels"])
		}
		reps, err := sc.Do(ctx, "SENTINEL", "REPLICAS", s.MasterName).Result()
		if err != nil {
			return false, fmt.Sprintf("sentinel %s: %v", sn.Addr, err)
		}
		list, _ := reps.([]any)
		seen := map[string]map[string]string{}
		for _, r := range list {
			f := fields(r)
			seen[f["ip"]+":"+f["port"]] = f
		}
		for _, r := range replicas {
			f, ok := seen[r.Addr]
			if !ok || f["flags"] != "slave" || f["role-reported"] != "slave" || f["master-link-status"] != "ok" ||
				f["master-host"]+":"+f["master-port"] != addr {
				return false, fmt.Sprintf("sentinel %s sees replica %s as %v", sn.Addr, r.Addr, f)
			}
		}
	}
	s.Master, s.Replicas = master, replicas
	return true, ""
}

// fields returns a Sentinel reply of field-value pairs (RESP2 array, or RESP3 map) as a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	case map[string]any:
		for k, v := range x {
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}
