package locking

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replica acknowledgement (Options.Replicas). Redis replicates asynchronously: a master that
// dies before a replica received the lock lets the replica that Sentinel (or Cluster)
// promotes grant the same lock again. WAIT n timeout, sent after a write on the same
// connection, blocks until n replicas acknowledged every write of that connection, or the
// timeout passes, and answers how many did. So the acquire script and its WAIT run on one
// connection borrowed from the pool (a *redis.Conn), on the master of the key's slot for a
// Cluster; the WAIT is sent only after an attempt that took the key (a failed attempt wrote
// nothing worth waiting for). Fewer acknowledgements than asked give the key back and the
// attempt counts as failed: the caller tries again within its wait. Renewals WAIT too: one
// that fewer replicas acknowledged is a failed renewal, so the watchdog's loss deadline runs
// from the last acknowledged one (see Options.Replicas).

// replicable reports whether WAIT can be sent to the node that runs a script of rdb.
func replicable(rdb redis.UniversalClient) bool {
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
		return true
	}
	return false
}

// nodeOf returns the client of the Redis node that runs the scripts of the Redis key key: rdb
// itself, or the master of key's slot on a Cluster.
func (c *Client) nodeOf(ctx context.Context, key string) (*redis.Client, error) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		return r.MasterForKey(ctx, key)
	}
	return nil, ErrReplicasUnsupported
}

// scripterFor returns what the acquire script of the Redis key key runs on: c.rdb without
// Options.Replicas, else one connection to the key's node (nil conn: none), to be closed by
// the caller, on which the WAIT follows.
func (c *Client) scripterFor(ctx context.Context, key string) (redis.Scripter, *redis.Conn, error) {
	if c.replicas == 0 {
		return c.rdb, nil, nil
	}
	n, err := c.nodeOf(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	conn := n.Conn()
	return conn, conn, nil
}

// reloadOnMoved makes a Cluster client reload its slot map when a call on one node's
// connection (scripterFor) met a slot that moved (MOVED, ASK): the cluster client follows
// them itself, a node's connection cannot. The call itself failed; the next one goes to the
// slot's new master.
func (c *Client) reloadOnMoved(err error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if ok && err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
		cc.ReloadState(context.Background())
	}
}

// closeConn returns a connection of scripterFor to the pool (nil: none).
func closeConn(conn *redis.Conn) {
	if conn != nil {
		_ = conn.Close()
	}
}

// waitReplicas sends WAIT Replicas ReplicaTimeout on conn, after its write. It returns nil
// when enough replicas acknowledged, an error wrapping ErrNotReplicated when fewer did, or
// the Redis error of the call (which then says nothing of the replicas). ctx bounds the call;
// the WAIT itself ends after ReplicaTimeout.
func (c *Client) waitReplicas(ctx context.Context, conn *redis.Conn) error {
	n, err := conn.Wait(ctx, c.replicas, c.replicaWait).Result()
	if err != nil {
		return fmt.Errorf("WAIT %d %d: %w", c.replicas, c.replicaWait.Milliseconds(), err)
	}
	if n < int64(c.replicas) {
		return fmt.Errorf("%w: %d of %d replica(s) within %s", ErrNotReplicated, n, c.replicas, c.replicaWait)
	}
	return nil
}

// ackTimeout bounds a call that ends with a WAIT: CallTimeout plus ReplicaTimeout.
func (c *Client) ackTimeout() time.Duration {
	if c.replicas == 0 {
		return c.callTimeout
	}
	return c.callTimeout + c.replicaWait
}

// ackAcquired is the WAIT after an acquire that took the key k for owner on conn (nil: no
// WAIT asked). When fewer replicas acknowledged, it gives the key back with giveBack (a
// compare-and-delete on any connection: the script already ran) and returns the
// ErrNotReplicated error: the attempt failed and may be tried again. When the WAIT or the give-back failed, it cleans up with forget
// (the owner tried for the last time) and returns an error that ends the wait: ErrNotObtained
// joined with ctx's error when ctx ended it, a Redis error otherwise.
func (c *Client) ackAcquired(ctx context.Context, conn *redis.Conn, name string,
	giveBack func(context.Context) error, forget func(context.Context)) error {
	if conn == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, c.ackTimeout())
	err := c.waitReplicas(wctx, conn)
	cancel()
	if err == nil {
		return nil
	}
	short := errors.Is(err, ErrNotReplicated)
	if short {
		cctx, cancel := c.bestEffort(ctx)
		gerr := giveBack(cctx)
		cancel()
		if gerr == nil {
			return err
		}
		err = fmt.Errorf("give back the unacknowledged lock: %w", gerr)
	}
	forget(ctx)
	if cerr := ended(ctx); cerr != nil {
		return errors.Join(ErrNotObtained, cerr)
	}
	return fmt.Errorf("locking: obtain %q: %w", name, err)
}

// shortfall records the ErrNotReplicated of the attempts of one obtain: result joins the last
// one to an ErrNotObtained that ended the wait.
type shortfall struct{ last error }

// note records err if it is a shortfall, and reports whether it was.
func (s *shortfall) note(err error) bool {
	if errors.Is(err, ErrNotReplicated) {
		s.last = err
		return true
	}
	return false
}

// result joins the recorded shortfall to err when err ended a wait (ErrNotObtained).
func (s *shortfall) result(err error) error {
	if s.last != nil && errors.Is(err, ErrNotObtained) && !errors.Is(err, ErrNotReplicated) {
		return errors.Join(err, s.last)
	}
	return err
}

// retryAfterShortfall is the longest sleep after an attempt whose lock no replica
// acknowledged: a WAIT timeout, so that a replica that is back is used soon.
func (c *Client) retryAfterShortfall() time.Duration { return c.replicaWait }

// evalEachAcked is evalEach for the renewals of a Multi under Options.Replicas: the keys are
// grouped by node, and on each node the scripts run pipelined on one connection followed by
// a WAIT (the nodes in parallel). It returns the commands, in the order of ks, and for each
// key the error of its node's WAIT (nil when acknowledged).
func (c *Client) evalEachAcked(ctx context.Context, script *redis.Script, ks []keys,
	args func(keys) ([]string, []any)) ([]*redis.Cmd, []error) {
	cmds := make([]*redis.Cmd, len(ks))
	acks := make([]error, len(ks))
	groups := map[*redis.Client][]int{}
	var order []*redis.Client
	for i, k := range ks {
		n, err := c.nodeOf(ctx, k.hash)
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		if groups[n] == nil {
			order = append(order, n)
		}
		groups[n] = append(groups[n], i)
	}
	var wg sync.WaitGroup
	for _, n := range order {
		idx := groups[n]
		wg.Go(func() {
			conn := n.Conn()
			defer closeConn(conn)
			sub := make([]keys, len(idx))
			for j, i := range idx {
				sub[j] = ks[i]
			}
			got := evalEach(ctx, conn, script, sub, args)
			for _, cmd := range got {
				c.reloadOnMoved(cmd.Err())
			}
			var werr error
			if !slices.ContainsFunc(got, func(cmd *redis.Cmd) bool { return cmd.Err() != nil }) {
				werr = c.waitReplicas(ctx, conn) // a failed script is its key's error already
			}
			for j, i := range idx {
				cmds[i], acks[i] = got[j], werr
			}
		})
	}
	wg.Wait()
	return cmds, acks
}
