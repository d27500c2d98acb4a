package handlers

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// faultOf builds, from X-Fault (demo mode only), the interceptor of the purchase's fault:
// "stall" (stallFault) or "crash" (crashFault); nil without the header.
func (s *server) faultOf(h http.Header) (inventory.Interceptor, error) {
	values, ok := h[http.CanonicalHeaderKey(headerFault)]
	if !ok {
		return nil, nil
	}
	if !s.demo {
		return nil, fmt.Errorf("%w: %s is only accepted when the server runs with --demo", inventory.ErrInvalid, headerFault)
	}
	strategy := h.Get(headerStrategy)
	if strategy == "" {
		strategy = s.defaultStrategy
	}
	switch {
	case len(values) == 1 && values[0] == faultStall:
		switch {
		case s.stallFor <= 0:
			return nil, fmt.Errorf("%w: the stall fault is only offered in demo mode", inventory.ErrInvalid)
		case strategy == inventory.StrategyRedlockGuard:
			return nil, fmt.Errorf("%w: the stall fault is not offered with %s", inventory.ErrInvalid, strategy)
		}
		return &stallFault{locker: s.stallLocker, pause: s.stallFor, hub: s.hub}, nil
	case len(values) == 1 && values[0] == faultCrash:
		if strategy != inventory.StrategySetnxExpire {
			return nil, fmt.Errorf("%w: the crash fault applies to %s only", inventory.ErrInvalid, inventory.StrategySetnxExpire)
		}
		return crashFault{}, nil
	}
	return nil, fmt.Errorf("%w: %s must be %q or %q", inventory.ErrInvalid, headerFault, faultStall, faultCrash)
}

// stallFault is the stall fault: the purchase's first write attempt stops for pause without
// watching anything, as a stop-the-world pause would, and the lock of lock and lock+guard
// comes from a lock client without watchdog (locker), so that its lease runs out meanwhile.
type stallFault struct {
	locker inventory.Locker
	pause  time.Duration
	hub    *Events
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
	if f.hub != nil {
		f.hub.publish(Event{Kind: eventStall, Item: itemID, Strategy: strategy, Quantity: 0, StallMS: ms(f.pause)})
	}
	t := time.NewTimer(f.pause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// eventStall: the stall fault stopped a purchase before its write.
const eventStall = "stall"

// crashFault is setnx-expire's crash fault: the lock's holder dies between its SETNX and its
// EXPIRE (pitfalls.Crashing).
type crashFault struct{}

func (crashFault) Locker(_ string, l inventory.Locker) inventory.Locker {
	c, _ := pitfalls.Crashing(l)
	return c
}

func (crashFault) BeforeWrite(context.Context, int64, string) error { return nil }
