//go:build !nodemo

package lab

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// pitfallLeaseCap bounds the fixed lease of the pitfall locks in the lab: half the longest
// work a lab buyer may ask for (inventory.MaxWork, the form's cap), so that the form's
// default work (1000 ms) outlives a pitfall lock's lease twice over and fixed-lease shows its
// lesson (a second holder enters while the first still works) with the defaults. The real
// lock keeps the storefront's lease (2 s with --demo): its watchdog's renewals stay visible,
// and the Redis calls keep their lease/10 timeout.
const pitfallLeaseCap = inventory.MaxWork / 2

// PitfallLease returns the fixed lease the lab gives the pitfall locks (setnx-expire,
// del-release, fixed-lease) on a storefront whose item lock lease is lease: the shorter of
// lease and half of inventory.MaxWork.
func PitfallLease(lease time.Duration) time.Duration { return min(lease, pitfallLeaseCap) }

// observedLocker is a pitfall lock (package pitfalls) that tells the event hub of its holds,
// as the real lock's hooks do: acquire (with its token and fixed lease), release (and whether
// the key was still the holder's), and crash (the crash fault's holder dying between SETNX and
// EXPIRE, its key left without a TTL). Its events carry Lock, the strategy's name: a pitfall
// lock is a lock of its own, beside the item's real lock. A pitfall lock never renews and never
// notices a loss: the page draws the lease's end from the acquire's lease.
type observedLocker struct {
	inner  *pitfalls.Locker
	name   string // the strategy, e.g. "fixed-lease"
	lease  time.Duration
	events *Events
	crash  bool // the inner lock is pitfalls.Crashing's
}

var (
	_ inventory.Locker   = (*observedLocker)(nil)
	_ inventory.Resetter = (*observedLocker)(nil)
)

func newObservedLocker(inner *pitfalls.Locker, name string, lease time.Duration, events *Events) *observedLocker {
	return &observedLocker{inner: inner, name: name, lease: lease, events: events}
}

// crashing returns the crash fault's variant of l (pitfalls.Crashing), still observed; false
// when l's lock has no such variant (not setnx-expire).
func (l *observedLocker) crashing() (*observedLocker, bool) {
	c, ok := pitfalls.Crashing(l.inner)
	if !ok {
		return l, false
	}
	out := *l
	out.inner, out.crash = c.(*pitfalls.Locker), true
	return &out, true
}

// Obtain obtains the pitfall lock and tells the hub.
func (l *observedLocker) Obtain(ctx context.Context, name string, floor int64) (inventory.Held, error) {
	start := time.Now()
	h, err := l.inner.Obtain(ctx, name, floor)
	item, isItem := inventory.ItemOfLock(name)
	if !isItem || l.events == nil {
		return h, err
	}
	if err != nil {
		if l.crash && errors.Is(err, inventory.ErrUnavailable) {
			l.events.publish(Event{Kind: EventCrash, Item: item, Lock: l.name, WaitedMS: ms(time.Since(start)), Message: err.Error()})
		}
		return nil, err
	}
	l.events.publish(Event{Kind: EventAcquired, Item: item, Token: h.Token(), Lock: l.name,
		LeaseMS: ms(l.lease), WaitedMS: ms(time.Since(start))})
	return &observedHeld{Held: h, l: l, item: item, since: time.Now()}, nil
}

// Reset resets the inner lock's keys (the catalogue reset).
func (l *observedLocker) Reset(ctx context.Context, stocks map[int64]int) error {
	return l.inner.Reset(ctx, stocks)
}

// observedHeld is one hold of an observedLocker: its release is told to the hub.
type observedHeld struct {
	inventory.Held
	l     *observedLocker
	item  int64
	since time.Time
	once  sync.Once
}

// Release releases the hold and tells the hub, once: Message says when the key was no
// longer the holder's (its lease had run out; a plain DEL deleted whoever's key was there).
func (h *observedHeld) Release(ctx context.Context) error {
	err := h.Held.Release(ctx)
	h.once.Do(func() {
		ev := Event{Kind: EventReleased, Item: h.item, Token: h.Token(), Lock: h.l.name, HeldMS: ms(time.Since(h.since))}
		if errors.Is(err, pitfalls.ErrNotHeld) {
			ev.Message = err.Error()
		}
		h.l.events.publish(ev)
	})
	return err
}
