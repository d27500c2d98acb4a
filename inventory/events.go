package inventory

import (
	"context"
	"errors"
	"fmt"
)

// Observer is told what happens to purchases, at the clear points of the strategies (the
// lab streams it). Observe is called synchronously on the purchase's goroutine: it
// must be quick and must not block. Config.Observer nil means no observer.
type Observer interface {
	Observe(Event)
}

// Event kinds an Observer receives.
const (
	EventWait         = "wait"          // a purchase starts waiting for the item's lock
	EventWaitEnd      = "wait_end"      // that wait ended (the lock was obtained or not)
	EventOrder        = "order"         // an order was written (Token: its fence token, 0 if none)
	EventFenceRefused = "fence_refused" // the fence refused a stale write (Token, Seen); nothing written
	EventSoldOut      = "sold_out"      // sold out or not enough stock; nothing written
	EventError        = "error"         // any other failed attempt (lock lost, timeout, database)
)

// Event is one thing that happened to one purchase attempt of an item.
type Event struct {
	Kind      string
	ItemID    int64
	Strategy  string
	Quantity  int
	Token     int64 // order, fence_refused: the fence token the write carried
	Seen      int64 // fence_refused: the token the database had already seen
	OrderID   int64 // order
	Remaining int   // order: the stock the write left
	Err       error // sold_out, error: why
}

// staleFenceError is the write a fence refused: it wraps ErrLockLost (the service retries it
// once) and keeps both tokens for the observer.
type staleFenceError struct {
	itemID, token, seen int64
}

func (e *staleFenceError) Error() string {
	return fmt.Sprintf("%s: stale fence token %d on item %d (database has seen %d)", ErrLockLost, e.token, e.itemID, e.seen)
}

func (e *staleFenceError) Unwrap() error { return ErrLockLost }

// observe reports the outcome of one purchase attempt (called by Service.run after each try).
func (d deps) observe(p purchase, strategy string, rec Receipt, err error) {
	if d.obs == nil {
		return
	}
	ev := Event{ItemID: p.itemID, Strategy: strategy, Quantity: p.quantity}
	var stale *staleFenceError
	switch {
	case err == nil:
		ev.Kind, ev.Token, ev.OrderID, ev.Remaining = EventOrder, rec.FenceToken, rec.OrderID, rec.Remaining
		if rec.Replayed {
			return // nothing happened: an earlier order was answered again
		}
	case errors.As(err, &stale):
		ev.Kind, ev.Token, ev.Seen = EventFenceRefused, stale.token, stale.seen
	case errors.Is(err, ErrSoldOut), errors.Is(err, ErrInsufficientStock):
		ev.Kind, ev.Err = EventSoldOut, err
	default:
		ev.Kind, ev.Err = EventError, err
	}
	d.obs.Observe(ev)
}

// emit reports ev when an observer is set.
func (d deps) emit(ev Event) {
	if d.obs != nil {
		d.obs.Observe(ev)
	}
}

// obtainObserved is obtain, through p's interceptor if it has one, told to the observer as a
// wait and its end.
func (d deps) obtainObserved(ctx context.Context, l Locker, p purchase, strategy string, floor int64) (Held, error) {
	d.emit(Event{Kind: EventWait, ItemID: p.itemID, Strategy: strategy, Quantity: p.quantity})
	wctx, span := d.trace.start(ctx, SpanLockWait)
	held, err := obtain(wctx, p.lockerFor(strategy, l), p.itemID, floor)
	waitEnded(span, p.itemID, held, err)
	d.emit(Event{Kind: EventWaitEnd, ItemID: p.itemID, Strategy: strategy, Quantity: p.quantity, Err: err})
	return held, err
}
