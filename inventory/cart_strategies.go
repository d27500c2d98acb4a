package inventory

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// cartOnce is one attempt of a cart write.
func (s *Service) cartOnce(ctx context.Context, c cart, name string, work time.Duration, record func(bool) recordFunc, sp *spent) (CartReceipt, error) {
	// One read of every item: it names every unknown item, gives the token floors, and
	// refuses a cart with a line its item's available stock (expired holds' units included)
	// cannot serve before any lock or work: that stock was read during the request, so the
	// answer is true. It decides no sale (the transaction does), except for naive, which
	// writes what it read.
	rows, err := s.store.readItems(ctx, c.ids())
	if err != nil {
		return CartReceipt{}, err
	}
	if err := shortOnRead(c, rows); err != nil {
		return CartReceipt{}, err
	}
	p := purchase{work: work, spent: sp}
	switch name {
	case StrategyNaive:
		return s.naiveCart(ctx, c, rows, p, record(false))
	case StrategyGuard:
		if err := s.deps.work(ctx, p); err != nil {
			return CartReceipt{}, err
		}
		return s.writeCartRecord(ctx, c, nil, name, record(false))
	}
	degraded := func(ctx context.Context) (CartReceipt, error) {
		s.log.WarnContext(ctx, "cart sold through the guard alone: lock service unavailable")
		if err := s.deps.work(ctx, p); err != nil {
			return CartReceipt{}, err
		}
		rec, err := s.writeCartRecord(ctx, c, nil, name, record(true))
		rec.Degraded = err == nil
		return rec, err
	}
	if s.cartHolds != nil {
		// Coalesced: the cart waits for a hold of its anchor item (coalesce_cart.go).
		floors := make(map[int64]int64, len(c.lines))
		for _, l := range c.lines {
			floors[l.itemID] = rows[l.itemID].FenceToken
		}
		cw := &cartWait{c: c, floors: floors, record: record, degraded: degraded}
		return s.cartHolds.buyCart(ctx, cw, work, sp)
	}
	keys := make([]KeyFloor, len(c.lines))
	for i, l := range c.lines {
		keys[i] = KeyFloor{Key: ItemLockName(l.itemID), Floor: rows[l.itemID].FenceToken}
	}
	if s.multi == nil {
		return CartReceipt{}, fmt.Errorf("%w: no multi-key lock service configured", ErrUnavailable)
	}
	start := time.Now()
	held, err := s.multi.ObtainMany(ctx, keys)
	sp.addLock(time.Since(start))
	if sellsDegraded(s.onDown, err) {
		return degraded(ctx)
	}
	if err != nil {
		return CartReceipt{}, err
	}
	defer func() {
		if err := held.Release(ctx); err != nil {
			s.log.DebugContext(ctx, "cart locks release failed", "err", err)
		}
	}()
	lctx := held.Context(ctx)
	if err := s.deps.work(lctx, p); err != nil {
		return CartReceipt{}, lostOr(ctx, lctx, err, c.lines[0].itemID)
	}
	if err := lctx.Err(); err != nil {
		return CartReceipt{}, lostOr(ctx, lctx, err, c.lines[0].itemID)
	}
	tokens := make(map[int64]int64, len(c.lines))
	for _, l := range c.lines {
		tokens[l.itemID] = held.Token(ItemLockName(l.itemID))
	}
	return s.writeCartRecord(ctx, c, tokens, name, record(false))
}

// writeCartRecord is writeCart with record, answering the receipt.
func (s *Service) writeCartRecord(ctx context.Context, c cart, tokens map[int64]int64, name string, record recordFunc) (CartReceipt, error) {
	var id int64
	lines, err := s.store.writeCart(ctx, c.lines, tokens, func(ctx context.Context, tx *sql.Tx, res []LineReceipt, now time.Time) error {
		var err error
		id, err = record(ctx, tx, res, now, newBatchID())
		return err
	})
	if err != nil {
		return CartReceipt{}, err
	}
	return CartReceipt{OrderID: id, Lines: lines, Strategy: name}, nil
}

// shortOnRead returns the ShortLinesError naming every line of c that the stock read in rows
// cannot serve, or nil.
func shortOnRead(c cart, rows map[int64]row) error {
	var short []ShortLine
	for _, l := range c.lines {
		if st := rows[l.itemID].Stock; st < l.quantity {
			short = append(short, ShortLine{ItemID: l.itemID, Requested: l.quantity, Available: max(st, 0)})
		}
	}
	if len(short) > 0 {
		return &ShortLinesError{Lines: short}
	}
	return nil
}

// naiveCart is the cart of naive, kept for teaching: it checks the stocks it read, works,
// then writes the stocks it computed (unconditional UPDATEs) and the order in one
// transaction. Concurrent carts overwrite each other's stocks: it oversells.
func (s *Service) naiveCart(ctx context.Context, c cart, rows map[int64]row, p purchase, record recordFunc) (CartReceipt, error) {
	if err := s.deps.work(ctx, p); err != nil {
		return CartReceipt{}, err
	}
	var id int64
	res := make([]LineReceipt, len(c.lines))
	err := s.store.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now().UTC()
		give, err := s.store.expireHolds(ctx, tx, c.ids())
		if err != nil {
			return err
		}
		if err := s.store.giveBackAll(ctx, tx, give, now); err != nil {
			return err
		}
		for i, l := range c.lines {
			left := rows[l.itemID].Stock - l.quantity
			if _, err := tx.ExecContext(ctx, s.store.sql(`UPDATE items SET stock = ?, updated_at = ? WHERE id = ?`), left, now, l.itemID); err != nil {
				return err
			}
			res[i] = LineReceipt{ItemID: l.itemID, Quantity: l.quantity, Remaining: left}
		}
		id, err = record(ctx, tx, res, now, newBatchID())
		return err
	})
	if err != nil {
		return CartReceipt{}, err
	}
	return CartReceipt{OrderID: id, Lines: res, Strategy: StrategyNaive}, nil
}
