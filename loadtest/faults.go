package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// The two Redis faults of -chaos failover and -chaos partition. Both find the instance that
// holds the hot item's lock through /api/debug/locks (which names the lock's Redis keys), so
// nothing here rebuilds the key layout.

// faultWait bounds each step of a fault that waits for something to happen.
const faultWait = 15 * time.Second

// mark appends a milestone to ev's timeline.
func (ev *ChaosEvent) mark(start time.Time, format string, a ...any) float64 {
	at := time.Since(start).Seconds()
	ev.Timeline = append(ev.Timeline, Milestone{At: at, What: fmt.Sprintf(format, a...)})
	return at
}

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
func (c *chaos) failover(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosFailover}
	hotID := r.hotID
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
	var holder *Instance
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
			if c.unwritten(ctx, h.Index, l.Token) && c.stillHeld(ctx, mc, l) {
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

// partition cuts the link between the instance holding the hot lock and Redis (a blackhole:
// nothing is refused, every byte is dropped) for 3x the lease. The holder's watchdog must
// declare the loss (its lock leaves its /api/debug/locks) before the lease could let another
// instance in (another instance shows the lock), and the holder's token must write nothing
// after the loss.
func (c *chaos) partition(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosPartition}
	hotID := r.hotID
	var holder *Instance
	var lock storeapi.HeldLock
	c.until(ctx, stop, func() bool {
		return c.eachHolder(ctx, hotID, func(h storeapi.Holder) bool {
			ev.Attempts++
			if c.cluster.Links[h.Index].Blackhole() != nil {
				return false
			}
			if c.stillHeld(ctx, c.rdb, h.Lock) {
				holder, lock = c.cluster.Instances[h.Index], h.Lock
				return true
			}
			_ = c.cluster.Links[h.Index].Heal() // released between the look-up and the cut
			return false
		})
	})
	if holder == nil {
		ev.Note = fmt.Sprintf("no holder of item %d's lock was caught (%d tries)", hotID, ev.Attempts)
		return ev
	}
	link := c.cluster.Links[holder.Index]
	ev.Confirmed, ev.Instance, ev.PID, ev.URL = true, holder.Index, holder.PID(), holder.URL
	ev.LockKey, ev.Token = lock.RedisKey, lock.Token
	ev.FaultAt = ev.mark(start, "instance %d (pid %d) holds %s token %d: its link to Redis black-holed", holder.Index, holder.PID(), lock.Name, lock.Token)
	ev.PausedAt = ev.FaultAt
	healAt := time.Now().Add(3 * c.lease)
	for time.Now().Before(healAt) {
		if ev.LossAt == 0 {
			if _, still := c.holdsToken(ctx, holder, hotID, lock.Token); !still {
				ev.LossAt = ev.mark(start, "instance %d dropped token %d (its watchdog declared the loss)", holder.Index, lock.Token)
			}
		}
		if ev.NextAt == 0 {
			for _, h := range c.holders(ctx, hotID) {
				if h.Index != holder.Index && h.Lock.Token > lock.Token {
					ev.NewToken = h.Lock.Token
					ev.NextAt = ev.mark(start, "instance %d holds %s token %d", h.Index, h.Lock.Name, h.Lock.Token)
					break
				}
			}
		}
		select {
		case <-stop:
			healAt = time.Now()
		case <-ctx.Done():
			healAt = time.Now()
		case <-time.After(5 * time.Millisecond):
		}
	}
	_ = link.Heal()
	ev.ResumedAt = ev.mark(start, "link healed")
	return ev
}

// until calls ok every 5ms until it is true (true), or faultWait passes or the run ends (false).
func (c *chaos) until(ctx context.Context, stop <-chan struct{}, ok func() bool) bool {
	deadline := time.Now().Add(faultWait)
	for time.Now().Before(deadline) {
		if ok() {
			return true
		}
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return false
}

// holdsToken reports whether instance in still lists the lock of item itemID with token
// (answered is false when it did not answer: then it is taken as still holding).
func (c *chaos) holdsToken(ctx context.Context, in *Instance, itemID, token int64) (answered, still bool) {
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	dl, err := storeapi.GetLocks(cctx, c.apis[0].hc, in.URL)
	if err != nil || dl.PID != in.PID() {
		return false, true
	}
	l, ok := dl.Item(itemID)
	return true, ok && l.Token == token
}

// unwritten reports whether no order carries token yet, asking an instance other than the
// stopped one (they share the database).
func (c *chaos) unwritten(ctx context.Context, stopped int, token int64) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	orders, err := c.apis[(stopped+1)%len(c.apis)].orders(cctx)
	if err != nil {
		return false
	}
	for _, o := range orders {
		if o.FenceToken == token {
			return false
		}
	}
	return true
}

// settle fills in what the answers and the order rows tell about the fault: how long after it
// selling resumed, how many purchases were refused meanwhile, what the faulted holder's
// token wrote and, for a failover, the next holder's token (hotID is the hot item).
func (ev *ChaosEvent) settle(start time.Time, purchases []*purchase, orders []order, instances int, hotID int64) {
	if ev == nil || ev.FaultAt == 0 {
		return
	}
	mode, _ := modeOf(ev.Mode)
	fault := start.Add(time.Duration(ev.FaultAt * float64(time.Second)))
	ev.ResumedAfter = -1
	first := time.Time{}
	for _, p := range purchases {
		for _, r := range p.Attempts {
			if r.Start.Before(fault) {
				continue
			}
			switch {
			case r.Status == 201:
				if end := r.Start.Add(r.Latency); first.IsZero() || end.Before(first) {
					first = end
				}
			case r.Status == 200, r.Code == "sold_out", r.Code == "insufficient_stock":
			default:
				ev.Refused++
			}
		}
	}
	if !first.IsZero() {
		ev.ResumedAfter = first.Sub(fault).Seconds()
	}
	if ev.Token == 0 {
		return
	}
	// The holder's own answers: attempt k of a purchase went to instance (Instance+k) mod n
	// (workload.execute). An order with the holder's token answered by another instance is
	// the next holder's twin token (the promoted replica issued the same number again).
	ev.HolderWrote = "nothing"
	mine := map[int64]bool{}     // orders of the holder's token answered by the holder
	byHolder := map[int64]bool{} // every order of the hot item the holder answered 201
	for _, p := range purchases {
		for k, r := range p.Attempts {
			if r.Status == 201 && r.Receipt.ItemID == hotID && (p.Instance+k)%instances == ev.Instance {
				byHolder[r.Receipt.OrderID] = true
				if r.Receipt.FenceToken == ev.Token {
					mine[r.Receipt.OrderID] = true
				}
			}
		}
	}
	if mode.tokensReissued && ev.NewToken > 0 {
		// The next holder is the first to lock the hot item on the promoted replica: the
		// lowest token another instance wrote the hot item with after the fault, when lower
		// than the one /api/debug/locks showed (a holder quicker than its polling is missed).
		// While the stale holder was stopped, no one else held the lock on the old master.
		for _, o := range orders {
			if o.ItemID == hotID && o.FenceToken > 0 && !byHolder[o.OrderID] && o.CreatedAt.After(fault) &&
				(ev.NewToken == 0 || o.FenceToken < ev.NewToken) {
				ev.NewToken = o.FenceToken
			}
		}
	}
	twin := false
	for _, o := range orders {
		if o.ItemID != hotID || o.FenceToken != ev.Token { // tokens count per item
			continue
		}
		if !mine[o.OrderID] {
			twin = true
			continue
		}
		at := o.CreatedAt.Sub(fault).Seconds()
		switch {
		case ev.LossAt > 0 && o.CreatedAt.After(start.Add(time.Duration(ev.LossAt*float64(time.Second)))):
			ev.HolderWrote = fmt.Sprintf("order %d, %.3fs after the fault, AFTER the loss was declared", o.OrderID, at)
		case mode.tokensReissued:
			// The failover's holder resumed and finished its purchase: the fence let its token
			// write once, as the newest the item had seen, whoever holds its twin.
			ev.HolderWrote = fmt.Sprintf("order %d, %.3fs after the fault: the holder resumed and finished its purchase, "+
				"and the fence accepted token %d once, as the newest the item had seen; it refuses any later write with "+
				"that token (the twin the promoted replica may issue) or an older one: the twin-token case working as "+
				"designed, safe, not an oversell", o.OrderID, at, ev.Token)
		default:
			ev.HolderWrote = fmt.Sprintf("order %d, %.3fs after the fault", o.OrderID, at)
		}
	}
	if twin && mode.tokensReissued {
		ev.HolderWrote += fmt.Sprintf(" (another instance wrote an order with the same token %d: a twin issued by the promoted replica)", ev.Token)
	}
}

// faultString describes the event of a fault other than a pause (of mode m).
func (e *ChaosEvent) faultString(m chaosMode) string {
	var b strings.Builder
	if e.Mode == chaosMix {
		b.WriteString("mix")
		if e.Note != "" {
			b.WriteString(": " + e.Note)
		} else if e.ResumedAfter >= 0 {
			fmt.Fprintf(&b, ": selling resumed %.2fs after the first fault, %d purchase(s) refused during the run's faults", e.ResumedAfter, e.Refused)
		}
	} else if e.Token == 0 {
		b.WriteString("no fault: " + e.Note)
	} else {
		fmt.Fprintf(&b, "%s: holder instance %d (pid %d), token %d", e.Mode, e.Instance, e.PID, e.Token)
		if e.NewToken > 0 {
			fmt.Fprintf(&b, ", next holder's token %d", e.NewToken)
		}
		if m.watchesLoss {
			switch {
			case e.LossAt > 0 && (e.NextAt == 0 || e.LossAt <= e.NextAt):
				fmt.Fprintf(&b, "; loss declared %.3fs after the cut, next holder %s", e.LossAt-e.FaultAt, after(e.NextAt, e.FaultAt))
			case e.LossAt > 0:
				fmt.Fprintf(&b, "; LOSS DECLARED LATE: %.3fs after the cut, next holder already at %.3fs", e.LossAt-e.FaultAt, e.NextAt-e.FaultAt)
			default:
				b.WriteString("; the holder never dropped the lock")
			}
		}
		fmt.Fprintf(&b, "; holder's token wrote: %s", e.HolderWrote)
		if e.ResumedAfter >= 0 {
			fmt.Fprintf(&b, "; selling resumed %.2fs after the fault, %d purchase(s) refused meanwhile", e.ResumedAfter, e.Refused)
		} else {
			fmt.Fprintf(&b, "; no sale after the fault (%d refused)", e.Refused)
		}
		if e.Note != "" {
			b.WriteString("; " + e.Note)
		}
	}
	for _, m := range e.Timeline {
		fmt.Fprintf(&b, "\n    %7.3fs  %s", m.At, m.What)
	}
	return b.String()
}

func after(at, from float64) string {
	if at == 0 {
		return "not seen during the cut"
	}
	return fmt.Sprintf("at %.3fs", at-from)
}
