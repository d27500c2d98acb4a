package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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
