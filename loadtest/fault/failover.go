package fault

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/cluster"
)

// The Redis faults of -chaos failover (here) and -chaos partition (partition.go). Both find the
// instance that holds the hot item's lock through /api/debug/locks (which names the lock's Redis
// keys), so nothing here rebuilds the key layout.

// StepWait bounds each step of a fault that waits for something to happen.
const StepWait = 15 * time.Second

// failover makes the promoted replica miss the hot item's lock and its latest fencing token,
// in the order that reliably does it (on a 2-core machine, ~1.3s from the master's death to
// the promotion):
//
//  1. SIGSTOP the replica, and CLIENT KILL TYPE replica on the master: what the master
//     writes from now on never reaches the replica;
//  2. let an instance take the hot lock on the master (a token the replica never sees), and
//     SIGSTOP that holder before its write (the GC pause that makes a stale write possible: a
//     holder that runs sees the loss through its watchdog on the new master; one stopped after
//     its write has nothing stale left to write, so it is resumed and another is caught);
//  3. SIGKILL the master, then SIGCONT the replica so that the Sentinels promote it (a replica
//     still stopped when the master dies makes them give up: no-good-slave);
//  4. once the Sentinels name the replica and another instance holds the hot lock on it,
//     resume the stale holder. The run's duration is extended until then, and until a
//     purchase sent after the fault is sold (fire), so that buyers keep coming.
//
// Between strategies the dead master is brought back as a replica of the new one (Rejoin).
//
// With --lock-replicas (c.lockReplicas), a lock is held only once the replica acknowledged
// it, so no instance can hold one while the replica is cut off: step 2 comes first (any
// holder, its lock acknowledged), then step 1, whose cut the replica still misses (the failed
// attempts of the others). After the promotion the stale holder is resumed at once, under the
// lock the promoted replica has, and the dead master rejoins as its replica: until then no
// lock is acknowledged (503 lock_not_replicated), and then selling resumes.
func (c *Chaos) failover(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosFailover}
	hotID := r.HotID
	set := c.cluster.Sentinel
	if err := set.Rejoin(ctx); err != nil {
		ev.Note = "the Sentinel set could not be restored after the last failover: " + err.Error()
		return ev
	}
	master, replica := set.Master, set.Replicas[0]
	mc := redis.NewClient(&redis.Options{Addr: master.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer mc.Close()
	ev.mark(start, "master %s (pid %d), replica %s (pid %d)", master.Addr, master.PID, replica.Addr, replica.PID)

	// The hot lock's fencing counter, named by a holder.
	var fenceKey string
	if !c.until(ctx, stop, func() bool {
		hs := c.holders(ctx, hotID)
		if len(hs) > 0 {
			fenceKey = hs[0].Lock.FenceKey
		}
		return len(hs) > 0
	}) {
		ev.Note = "no instance was seen holding the hot lock"
		return ev
	}

	resumed := false
	defer func() { // never leave the replica stopped
		if !resumed {
			_ = replica.Signal(syscall.SIGCONT)
		}
	}()
	var cut int64 // the replica has at most this token
	cutReplica := func() bool {
		if err := replica.Signal(syscall.SIGSTOP); err != nil {
			ev.Note = "SIGSTOP replica: " + err.Error()
			return false
		}
		ev.mark(start, "replica stopped (SIGSTOP)")
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		killed, err := mc.ClientKillByFilter(cctx, "TYPE", "replica").Result()
		cut, _ = mc.Get(cctx, fenceKey).Int64()
		cancel()
		if err != nil {
			ev.Note = "CLIENT KILL TYPE replica: " + err.Error()
			return false
		}
		ev.mark(start, "CLIENT KILL TYPE replica on the master (%d link(s)); the replica has tokens up to %d at most", killed, cut)
		return true
	}
	acked := c.lockReplicas > 0
	if !acked && !cutReplica() {
		return ev
	}

	// A holder with a token the replica never saw, stopped while the master still has its lock.
	var holder *cluster.Instance
	var lock storeapi.HeldLock
	c.until(ctx, stop, func() bool {
		return c.eachHolder(ctx, hotID, func(h storeapi.Holder) bool {
			in, l := c.cluster.Instances[h.Index], h.Lock
			if l.Token <= cut {
				return false
			}
			ev.Attempts++
			if in.Pause() != nil {
				return false
			}
			// Stopped, it cannot write from now on; the lock is checked last, right before the kill.
			if c.unwritten(ctx, h.Index, hotID, l.Token) && c.stillHeld(ctx, mc, l) {
				holder, lock = in, l
				return true
			}
			// It released between the look-up and the SIGSTOP, or its write already landed
			// (stopped between its write and its release: nothing stale left to write, and
			// the item's fence, the next lock's floor, already holds its token).
			_ = in.Resume()
			return false
		})
	})
	if holder == nil {
		ev.Note = fmt.Sprintf("no holder of item %d's lock with a token above %d was caught (%d tries)", hotID, cut, ev.Attempts)
		return ev
	}
	ev.Paused, ev.Confirmed, ev.Instance, ev.PID, ev.URL = true, true, holder.Index, holder.PID(), holder.URL
	ev.LockKey, ev.Token = lock.RedisKey, lock.Token
	where := "on the master only"
	if acked {
		where = "acknowledged by the replica"
	}
	ev.PausedAt = ev.mark(start, "instance %d (pid %d) holds %s token %d %s: stopped (SIGSTOP)",
		holder.Index, holder.PID(), lock.Name, lock.Token, where)
	defer func() { // never leave the holder stopped
		if ev.ResumedAt == 0 {
			_ = holder.Resume()
			ev.ResumedAt = time.Since(start).Seconds()
		}
	}()
	if acked && !cutReplica() {
		return ev
	}

	if err := master.Signal(syscall.SIGKILL); err != nil {
		ev.Note = "SIGKILL master: " + err.Error()
		return ev
	}
	ev.FaultAt = ev.mark(start, "master killed (SIGKILL)")
	resumed = true
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		ev.Note = "SIGCONT replica: " + err.Error()
		return ev
	}
	ev.mark(start, "replica continued (SIGCONT)")
	if !c.until(ctx, stop, func() bool {
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		addr, err := set.MasterAddr(actx)
		return err == nil && addr == replica.Addr
	}) {
		ev.Note = "the Sentinels did not promote the replica in time"
		return ev
	}
	ev.mark(start, "the Sentinels name the replica %s master", replica.Addr)
	if acked {
		_ = holder.Resume()
		ev.ResumedAt = ev.mark(start, "stale holder resumed (SIGCONT) at once: the promoted replica has its lock")
		if err := set.Rejoin(ctx); err != nil {
			ev.Note = "the dead master did not rejoin as a replica: " + err.Error()
			return ev
		}
		ev.mark(start, "the dead master rejoined as a replica of %s: locks are acknowledged again", set.Master.Addr)
	}
	if c.until(ctx, stop, func() bool {
		for _, h := range c.holders(ctx, hotID) {
			if h.Index == holder.Index {
				continue
			}
			ev.NewToken = h.Lock.Token
			ev.mark(start, "instance %d holds %s token %d on the new master", h.Index, h.Lock.Name, h.Lock.Token)
			return true
		}
		return false
	}) {
		if !acked {
			_ = holder.Resume()
			ev.ResumedAt = ev.mark(start, "stale holder resumed (SIGCONT)")
		}
	} else {
		ev.Note = "no other instance took the hot lock on the new master in time"
	}
	return ev
}
