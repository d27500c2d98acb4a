package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

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
