//go:build !nodemo

package lab

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// The lab's faults are asked for with the header handlers.HeaderFault (X-Fault; the name is
// part of the storefront's HTTP contract, which refuses it outside demo mode): "stall" stops
// the purchase before its write for longer than its lock's lease; "crash" (setnx-expire only)
// makes its lock's holder die between SETNX and EXPIRE. On the demo carts' checkout it takes
// "barrier" (request-order only, with handlers.HeaderBarrier; carts.go).

// Events of the stall fault: a purchase stops before its write (StallMS: for how long), and
// goes on.
const (
	EventStall    = "stall"
	EventStallEnd = "stall_end"
)

// faults builds, from X-Fault, the interceptor of the purchase's fault (handlers.Config.Intercept):
// nil without the header.
func (s *Storefront) faults(r *http.Request) (inventory.Interceptor, error) {
	values, ok := r.Header[http.CanonicalHeaderKey(handlers.HeaderFault)]
	if !ok {
		return nil, nil
	}
	strategy := r.Header.Get(handlers.HeaderStrategy)
	if strategy == "" {
		strategy = s.cfg.Strategy
	}
	switch {
	case len(values) == 1 && values[0] == faultStall:
		switch {
		case s.cfg.StallFor <= 0:
			return nil, fmt.Errorf("%w: the stall fault is not offered (no stall length)", inventory.ErrInvalid)
		case strategy == inventory.StrategyRedlockGuard:
			return nil, fmt.Errorf("%w: the stall fault is not offered with %s", inventory.ErrInvalid, strategy)
		}
		return &stallFault{locker: s.stallLocker, pause: s.cfg.StallFor, events: s.events}, nil
	case len(values) == 1 && values[0] == faultCrash:
		if strategy != inventory.StrategySetnxExpire {
			return nil, fmt.Errorf("%w: the crash fault applies to %s only", inventory.ErrInvalid, inventory.StrategySetnxExpire)
		}
		return crashFault{}, nil
	}
	return nil, fmt.Errorf("%w: %s must be %q or %q", inventory.ErrInvalid, handlers.HeaderFault, faultStall, faultCrash)
}

// stallFault is the stall fault: the purchase's first write attempt stops for pause without
// watching anything, as a stop-the-world pause would, and the lock of lock and lock+guard
// comes from a lock client without watchdog (locker), so that its lease runs out meanwhile.
type stallFault struct {
	locker inventory.Locker
	pause  time.Duration
	events *Events
	once   sync.Once
}

func (f *stallFault) Locker(strategy string, l inventory.Locker) inventory.Locker {
	if f.locker != nil && (strategy == inventory.StrategyLock || strategy == inventory.StrategyLockGuard) {
		return f.locker
	}
	return l
}

func (f *stallFault) BeforeWrite(ctx context.Context, itemID int64, strategy string) error {
	first := false
	f.once.Do(func() { first = true })
	if !first {
		return nil // the fault stops the first attempt only
	}
	f.events.publish(Event{Kind: EventStall, Item: itemID, Strategy: strategy, StallMS: ms(f.pause)})
	t := time.NewTimer(f.pause)
	defer t.Stop()
	defer f.events.publish(Event{Kind: EventStallEnd, Item: itemID, Strategy: strategy})
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// crashFault is setnx-expire's crash fault: the lock's holder dies between its SETNX and its
// EXPIRE (pitfalls.Crashing).
type crashFault struct{}

func (crashFault) Locker(_ string, l inventory.Locker) inventory.Locker {
	if ol, ok := l.(*observedLocker); ok {
		c, _ := ol.crashing()
		return c
	}
	c, _ := pitfalls.Crashing(l)
	return c
}

func (crashFault) BeforeWrite(context.Context, int64, string) error { return nil }
