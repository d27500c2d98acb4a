package fault

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/cluster"
)

// clockJumps is how many times -chaos clock steps Redis's clock during one strategy's run.
const clockJumps = 6

// clockJump steps the clock of Redis forward past the lease while the hot item's lock is held
// (and the holder works), clockJumps times, a lease apart: each time the holder's key expires
// at once although the holder believes it has most of its lease left, another instance takes
// the lock, and the holder goes on until its watchdog's next renewal finds the lock gone. A
// strategy without a fence may then write over the next holder's sale; a fenced one is refused.
func (c *Chaos) clockJump(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosClock}
	step := 2 * c.lease
	expired, jumps := 0, 0
	for jump := 0; jump < clockJumps; jump++ {
		var holder *cluster.Instance
		var lock storeapi.HeldLock
		var pttl time.Duration
		if !c.until(ctx, stop, func() bool {
			return c.eachHolder(ctx, r.HotID, func(h storeapi.Holder) bool {
				ev.Attempts++
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				d, err := c.rdb.PTTL(cctx, h.Lock.RedisKey).Result()
				if err != nil || d <= 0 {
					return false // released (or expired) between the look-up and now
				}
				holder, lock, pttl = c.cluster.Instances[h.Index], h.Lock, d
				return true
			})
		}) {
			break
		}
		offset, err := c.cluster.Clock.Jump(step)
		if err != nil {
			ev.Note = "clock: " + err.Error()
			break
		}
		// The step passed the TTL the holder's key had: it ended at once. Another instance
		// may already hold the key again (same name) by the time it is looked at.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		left, err := c.rdb.PTTL(cctx, lock.RedisKey).Result()
		cancel()
		jumps++
		what := "still there"
		switch {
		case pttl < step && err == nil && left == -2:
			what, expired = "its TTL ended at once: key gone", expired+1
		case pttl < step && err == nil:
			what, expired = fmt.Sprintf("its TTL ended at once: key already taken again (PTTL %s)", left), expired+1
		case err != nil:
			what = "PTTL: " + err.Error()
		}
		at := ev.mark(start, "instance %d holds %s token %d with %s of its lease left: Redis's clock stepped %s forward (now +%s); %s",
			holder.Index, lock.Name, lock.Token, pttl.Round(time.Millisecond), step, offset, what)
		if jump == 0 {
			ev.FaultAt, ev.PausedAt = at, at
			ev.Confirmed, ev.Instance, ev.PID, ev.URL = true, holder.Index, holder.PID(), holder.URL
			ev.LockKey, ev.Token = lock.RedisKey, lock.Token
			c.watchNext(ctx, stop, ev, holder, lock, r.HotID, start)
		}
		if !c.wait(ctx, stop, c.lease) {
			break
		}
	}
	ev.ResumedAt = ev.mark(start, "%d clock step(s), %d of which ended the holder's key at once", jumps, expired)
	if ev.Token == 0 {
		ev.Note = fmt.Sprintf("no holder of item %d's lock was caught (%d tries)", r.HotID, ev.Attempts)
	}
	return ev
}

// watchNext records, for at most a lease, when the first holder's own lock set dropped the
// lock (its watchdog declared the loss) and when another instance took it.
func (c *Chaos) watchNext(ctx context.Context, stop <-chan struct{}, ev *Event, holder *cluster.Instance, lock storeapi.HeldLock, hotID int64, start time.Time) {
	until := time.Now().Add(c.lease)
	for time.Now().Before(until) && (ev.LossAt == 0 || ev.NextAt == 0) {
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
		if !c.wait(ctx, stop, 5*time.Millisecond) {
			return
		}
	}
}
