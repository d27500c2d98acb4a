package locking

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Takeover (WithTakeover) lets a waiter take the lock of a holder whose process died, within
// about Options.ProcessTTL of the death instead of the holder's whole lease. It is for
// callers whose writes are fenced by the lock's token and guarded, and only for them: a holder
// that is not dead but stopped (a pause, a partition from Redis longer than ProcessTTL) loses
// its lock to the waiter while it may still write, and only the fence keeps that write out.
//
// The rules:
//   - An owner names its process only when its Obtain asked for takeover (owner@process): a
//     takeover waiter evicts only such owners, never the lock of a caller that did not ask.
//   - A takeover waiter that has waited ProcessTTL (under normal contention the lock changes
//     hands sooner, and no check is made) reads the lock's holder, and for the fair lock the
//     first owners of its queue, then the process key of each owner's process; it repeats
//     that every ProcessTTL/3 while it waits.
//   - An owner whose process key is gone is evicted by the waiter's next attempt
//     (takeover.lua, takeover_fair.lua), only if it is still the owner the waiter saw, in the
//     script that then takes the lock with a new fencing token.

// WithTakeover makes an Obtain, ObtainFair or ObtainMany take over the locks of dead
// processes (see Options.ProcessTTL), and makes the lock it obtains one that takeover
// waiters may take when this process dies. Use it only when every write made under the lock
// is fenced by the lock's token and guarded, and when every caller of the key uses it: an
// evicted holder that was only paused still holds its Lock until its watchdog's next renewal
// finds it gone, and may write meanwhile. The first such Obtain of a Client sets its process
// key (one Redis call) and starts its renewal; Close stops it. TryObtain never waits, so it
// never takes over, but its lock still names its process. Redlock ignores it (no takeover
// across independent nodes: a Redlock waiter waits out the lease).
func WithTakeover() ObtainOption {
	return func(c *obtainConfig) { c.takeover = true }
}

// An owner token of a Client's lock (Obtain, ObtainFair, ObtainMany) is newOwner's random
// token followed by the Client's process id (Client.Process), so that a lock names the
// process that holds it: random@process when the Obtain asked for takeover, random#process
// otherwise. Only the first kind can be taken over.
const (
	processSep      = "@"
	plainProcessSep = "#"
)

// ownerFor returns a new owner token for an Obtain of this Client.
func (c *Client) ownerFor(takeover bool) string {
	if takeover {
		return newOwner() + processSep + c.process
	}
	return newOwner() + plainProcessSep + c.process
}

// HolderProcess returns the process id (Client.Process) of the Client whose lock has the
// owner token owner (the field of the lock hash, KeysOf), and whether that lock may be taken
// over (its Obtain asked for it: WithTakeover). It returns "", false for an owner that names
// no process (a Redlock's, a semaphore's).
func HolderProcess(owner string) (process string, takeover bool) {
	if p, ok := processOf(owner); ok {
		return p, true
	}
	_, p, _ := strings.Cut(owner, plainProcessSep)
	return p, false
}

// processOf returns the process id that owner names, if it names one and may be taken over.
func processOf(owner string) (string, bool) {
	_, p, ok := strings.Cut(owner, processSep)
	return p, ok && p != ""
}

// takeover is the takeover state of one waiting Obtain (nil: it did not ask for takeover).
type takeover struct {
	c     *Client
	since time.Time // the first attempt that failed
	next  time.Time // when the blockers are read next
}

// newTakeover returns the takeover state of an Obtain that asked for it, or nil.
func (c *Client) newTakeover(on bool) *takeover {
	if !on {
		return nil
	}
	return &takeover{c: c}
}

// failed notes an attempt that found the lock taken and returns how long at most to sleep:
// hint, the holder's remaining lease, cut so that the waiter is back when a check is due.
func (t *takeover) failed(hint time.Duration) time.Duration {
	if t == nil {
		return hint
	}
	now := time.Now()
	if t.since.IsZero() {
		t.since, t.next = now, now.Add(t.c.processTTL)
	}
	d := max(t.next.Sub(now), time.Millisecond)
	if hint <= 0 || d < hint {
		return d
	}
	return hint
}

// due reports whether a check of the blockers is due, and if so schedules the next one.
func (t *takeover) due() bool {
	if t == nil || t.since.IsZero() || time.Now().Before(t.next) {
		return false
	}
	t.next = time.Now().Add(t.c.processTTL / 3)
	return true
}

// dead returns, when a check is due, the blockers of k whose processes are dead: its holder,
// and with fair, the owners among the first of its queue. It returns nothing when no check is
// due or when Redis could not be asked (the attempt that follows sees the failure itself).
func (t *takeover) dead(ctx context.Context, k keys, fair bool) (holder string, queued []string) {
	if !t.due() {
		return "", nil
	}
	c := t.c
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	hk := pipe.HKeys(cctx, k.hash)
	var qc *redis.StringSliceCmd
	if fair {
		qc = pipe.LRange(cctx, k.fair().queue, 0, deadQueueScan-1)
	}
	if _, err := pipe.Exec(cctx); err != nil {
		return "", nil
	}
	owners, _ := hk.Result()
	if len(owners) == 1 && len(t.deadOf(cctx, owners)) == 1 {
		holder = owners[0]
	}
	if qc != nil {
		queue, _ := qc.Result()
		queued = t.deadOf(cctx, queue)
	}
	if holder != "" || len(queued) > 0 {
		c.log.Info("locking: taking over from a dead process", "key", k.name, "holder", holder, "queued", len(queued))
	}
	return holder, queued
}

// deadOf returns the owners among owners that asked for takeover and whose process keys are
// gone (one EXISTS per process named; an answer that does not come counts as alive).
func (t *takeover) deadOf(ctx context.Context, owners []string) []string {
	alive := map[string]bool{t.c.process: true}
	var dead []string
	for _, o := range owners {
		p, ok := processOf(o)
		if !ok {
			continue
		}
		live, seen := alive[p]
		if !seen {
			n, err := t.c.rdb.Exists(ctx, t.c.processKey(p)).Result()
			live = err != nil || n > 0
			alive[p] = live
		}
		if !live {
			dead = append(dead, o)
		}
	}
	return dead
}

// deadQueueScan is how many owners at the head of a fair queue a takeover check reads: the
// waiters of a process that died are evicted in one check, up to this many.
const deadQueueScan = 16
