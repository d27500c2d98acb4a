//go:build !nodemo

package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The demo cart strategies: the two classic mistakes of selling a cart, kept to be seen
// failing next to the real cart strategies (CartStrategies) that avoid them. They sell
// through Service.DemoCheckout only, never through Checkout.
const (
	// StrategyRequestOrder takes the item locks of a cart one at a time, in the order of the
	// cart's lines, then writes as lock+guard does. Two carts {A,B} and {B,A} each take their
	// first lock and wait for the other's until their lock wait ends: nothing sells. The fix
	// is lock+guard's canonical order (ObtainMany: every key, in one sorted order).
	StrategyRequestOrder = "request-order"
	// StrategyLineByLine checks each line of a cart alone against the stock it read, then
	// takes every line's units off the stock (no guard): two lines of one item each pass
	// alone and together sell more than there is. The fix is guard's merged lines, checked
	// and written in one transaction.
	StrategyLineByLine = "line-by-line"
)

// DemoCartStrategies describes the demo cart strategies, in order.
func DemoCartStrategies() []StrategyInfo {
	return []StrategyInfo{
		{Name: StrategyRequestOrder, Demo: true, Locks: true,
			HowIt:  "each item's lock taken alone, in the order of the cart's lines; then lock+guard's fenced, guarded write",
			Safety: "never oversells, but carts {A,B} and {B,A} each hold one lock and wait for the other's: both wait their whole lock wait and sell nothing"},
		{Name: StrategyLineByLine, Demo: true,
			HowIt:  "each line checked alone against the stock read, then every line's units taken off, unguarded",
			Safety: "oversells: two lines of one item each fit the stock alone, and together take more than there is"},
	}
}

// CartInterceptor stands between the lock steps of a request-order cart: the lab's barrier
// uses it to make two carts interleave the same way on every run. Its methods run on the
// cart's goroutine.
type CartInterceptor interface {
	// FirstLock runs once the cart holds its first item's lock, before it asks for the next
	// one; an error ends the cart (its lock is released).
	FirstLock(ctx context.Context) error
	// LocksEnded runs once the cart's lock waits are over (every lock taken, or a wait
	// refused), before it releases a lock or sells.
	LocksEnded(ctx context.Context)
}

// DemoCheckoutRequest asks to sell a cart with a demo cart strategy.
type DemoCheckoutRequest struct {
	Lines     []CartLine      // as for Checkout; the order of the lines is the request order
	Strategy  string          // one of DemoCartStrategies
	Work      time.Duration   // simulated slow work (a payment call), 0..MaxWork
	Intercept CartInterceptor // request-order only; nil: none
}

// DemoCheckout sells req.Lines with a demo cart strategy (StrategyRequestOrder,
// StrategyLineByLine): all lines or none, one order with one line per item, as Checkout. It
// takes no idempotency key. Errors wrap ErrInvalid, ErrNotFound, ErrInsufficientStock (a
// *ShortLinesError), ErrLockTimeout (a lock wait ended), ErrLockLost, ErrUnavailable.
func (s *Service) DemoCheckout(ctx context.Context, req DemoCheckoutRequest) (CartReceipt, error) {
	c, err := mergeLines(req.Lines)
	if err != nil {
		return CartReceipt{}, err
	}
	if req.Work < 0 || req.Work > MaxWork {
		return CartReceipt{}, fmt.Errorf("%w: simulated work must be from 0s to %s, got %s", ErrInvalid, MaxWork, req.Work)
	}
	if req.Intercept != nil && req.Strategy != StrategyRequestOrder {
		return CartReceipt{}, fmt.Errorf("%w: a cart interceptor applies to %s only", ErrInvalid, StrategyRequestOrder)
	}
	var rec CartReceipt
	switch req.Strategy {
	case StrategyRequestOrder:
		rec, err = s.requestOrderCart(ctx, c, requestOrder(req.Lines), req.Work, req.Intercept)
	case StrategyLineByLine:
		rec, err = s.lineByLineCart(ctx, c, req.Lines, req.Work)
	default:
		names := make([]string, 0, 2)
		for _, info := range DemoCartStrategies() {
			names = append(names, info.Name)
		}
		return CartReceipt{}, fmt.Errorf("%w: strategy %q is not a demo cart strategy (offered: %v)", ErrInvalid, req.Strategy, names)
	}
	return rec, s.dbErr(err)
}

// requestOrder returns the items of lines in the order they first appear.
func requestOrder(lines []CartLine) []int64 {
	var ids []int64
	for _, l := range lines {
		if !slices.Contains(ids, l.ItemID) {
			ids = append(ids, l.ItemID)
		}
	}
	return ids
}

// requestOrderCart takes the lock of each item of order, one at a time (each one's token above
// the item's stored fence), then works under them and writes as lock+guard does.
func (s *Service) requestOrderCart(ctx context.Context, c cart, order []int64, work time.Duration, ic CartInterceptor) (CartReceipt, error) {
	locker, ok := s.multi.(Locker)
	if !ok {
		return CartReceipt{}, fmt.Errorf("%w: no lock service configured", ErrUnavailable)
	}
	rows, err := s.store.readItems(ctx, c.ids())
	if err != nil {
		return CartReceipt{}, err
	}
	quantity := make(map[int64]int, len(c.lines))
	for _, l := range c.lines {
		quantity[l.itemID] = l.quantity
	}
	var held []Held
	defer func() {
		for _, h := range slices.Backward(held) {
			s.deps.release(ctx, h)
		}
	}()
	for i, id := range order {
		h, err := s.deps.obtainObserved(ctx, locker, purchase{itemID: id, quantity: quantity[id]}, StrategyRequestOrder, rows[id].FenceToken)
		if err != nil {
			if ic != nil {
				ic.LocksEnded(ctx)
			}
			return CartReceipt{}, fmt.Errorf("item %d, lock %d of %d in request order: %w", id, i+1, len(order), err)
		}
		held = append(held, h)
		if i == 0 && ic != nil {
			if err := ic.FirstLock(ctx); err != nil {
				return CartReceipt{}, err
			}
		}
	}
	if ic != nil {
		ic.LocksEnded(ctx)
	}
	lctx := ctx
	tokens := make(map[int64]int64, len(held))
	for i, h := range held {
		lctx = h.Context(lctx) // ends when any of the locks is lost
		tokens[order[i]] = h.Token()
	}
	if err := s.deps.work(lctx, purchase{work: work}); err != nil {
		return CartReceipt{}, lostOr(ctx, lctx, err, order[0])
	}
	if err := lctx.Err(); err != nil {
		return CartReceipt{}, lostOr(ctx, lctx, err, order[0])
	}
	return s.writeCartRecord(ctx, c, tokens, StrategyRequestOrder, s.demoRecord(c, StrategyRequestOrder))
}

// demoRecord stores a demo cart's order, without an idempotency key.
func (s *Service) demoRecord(c cart, name string) recordFunc {
	return func(ctx context.Context, tx *sql.Tx, res []LineReceipt, now time.Time, batch int64) (int64, error) {
		return s.store.insertCartOrder(ctx, tx, res, name, "", c.fp, false, now, batch)
	}
}

// lineByLineCart checks every line of lines alone against the stock read before anything is
// written, works, then, in one transaction, takes each line's units off its item's stock
// (no guard) and records one order of the merged lines.
func (s *Service) lineByLineCart(ctx context.Context, c cart, lines []CartLine, work time.Duration) (CartReceipt, error) {
	rows, err := s.store.readItems(ctx, c.ids())
	if err != nil {
		return CartReceipt{}, err
	}
	var short []ShortLine
	for _, l := range lines {
		if st := rows[l.ItemID].Stock; st < l.Quantity { // this line alone, against the stock read
			short = append(short, ShortLine{ItemID: l.ItemID, Requested: l.Quantity, Available: max(st, 0)})
		}
	}
	if len(short) > 0 {
		return CartReceipt{}, &ShortLinesError{Lines: short}
	}
	if err := s.deps.work(ctx, purchase{work: work}); err != nil {
		return CartReceipt{}, err
	}
	record := s.demoRecord(c, StrategyLineByLine)
	var id int64
	var res []LineReceipt
	err = s.store.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now().UTC()
		give, err := s.store.expireHolds(ctx, tx, c.ids())
		if err != nil {
			return err
		}
		if err := s.store.giveBackAll(ctx, tx, give, now); err != nil {
			return err
		}
		remaining := make(map[int64]int, len(c.lines))
		for _, l := range lines {
			var left int
			err := tx.QueryRowContext(ctx, s.store.sql(`UPDATE items SET stock = stock - ?, updated_at = ? WHERE id = ? RETURNING stock`),
				l.Quantity, now, l.ItemID).Scan(&left)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: item %d", ErrNotFound, l.ItemID)
			}
			if err != nil {
				return err
			}
			remaining[l.ItemID] = left
		}
		res = make([]LineReceipt, len(c.lines))
		for i, l := range c.lines {
			res[i] = LineReceipt{ItemID: l.itemID, Quantity: l.quantity, Remaining: remaining[l.itemID]}
		}
		id, err = record(ctx, tx, res, now, newBatchID())
		return err
	})
	if err != nil {
		return CartReceipt{}, err
	}
	return CartReceipt{OrderID: id, Lines: res, Strategy: StrategyLineByLine}, nil
}
