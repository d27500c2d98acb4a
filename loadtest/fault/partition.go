package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/cluster"
)

// partition cuts the link between the instance holding the hot lock and Redis (a blackhole:
// nothing is refused, every byte is dropped) for 3x the lease. The holder's watchdog must
// declare the loss (its lock leaves its /api/debug/locks) before the lease could let another
// instance in (another instance shows the lock), and the holder's token must write nothing
// after the loss.
func (c *Chaos) partition(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosPartition}
	hotID := r.HotID
	var holder *cluster.Instance
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
