package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// sale is one sale of a write: a single purchase (lines nil: its one line is p's item and
// quantity) or a cart (lines, merged and ascending by item; record stores what it becomes: an
// order and its lines, or a stock hold). A single purchase is a cart of one line that records
// itself as a purchase's order.
type sale struct {
	p      purchase
	lines  []cartLine
	record recordFunc
}

// isCart reports whether s is a cart (it has a record function).
func (s sale) isCart() bool { return s.record != nil }

// saleResult is one sale's outcome in a write of several: a purchase's receipt, or a cart's
// lines and the id its record function returned.
type saleResult struct {
	rec   Receipt
	cart  CartReceipt
	err   error // errDuplicateKey (its key is taken); a cart alone: *ShortLinesError, ErrLockLost, ErrNotFound
	short bool  // a cart refused alone for want of stock of one of its other items
}

// maxExtraRetries bounds how often writeSales runs its transaction again after an item other
// than the anchor refused its guarded update although the read in the same transaction let
// it pass (PostgreSQL's READ COMMITTED: another writer committed in between).
const maxExtraRetries = 2

// errExtraMoved rolls back a write whose guarded update of an item other than the anchor
// changed nothing although its read in the same transaction let it pass.
var errExtraMoved = errors.New("inventory: an item of a cart changed between its read and its guarded update")

// writeSales is the package's one guarded write: of one purchase (writeOne), of the batch of
// a coalesced hold of anchor, and of the carts that hold admitted. In ONE short transaction:
//   - the expired holds of every item are ended (expireHolds);
//   - every item other than the anchor is read (stock, fence); a cart whose other item's token
//     is stale (the database has seen it or a newer one), or whose other lines do not fit in
//     what is left of that stock beside the carts before it, is refused alone (ErrLockLost,
//     *ShortLinesError) and nothing is written for it;
//   - then, in ONE pass ascending by item id (row locks in item order on PostgreSQL), each
//     item's expired units are given back and ONE guarded update per item takes the total of
//     the sales kept (fenced with tokens[item] when it is positive: sqlFencedUpdate, refused
//     once a token has written: each token writes once);
//   - then the orders (or holds), in order, under one batch id: a purchase's order and line, a
//     cart's record. A key already taken gets nothing (errDuplicateKey) and its units go back
//     in the same transaction; when nothing is recorded at all, the transaction rolls back.
//
// An anchor update that changes nothing fails the whole write with refusal's error (stale
// fence: ErrLockLost; ErrSoldOut or ErrInsufficientStock for the anchor's total; ErrNotFound).
func (st store) writeSales(ctx context.Context, anchor int64, sales []sale, strategy string, tokens map[int64]int64) ([]saleResult, error) {
	for attempt := 0; ; attempt++ {
		out := make([]saleResult, len(sales))
		err := st.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			return st.writeSalesTx(ctx, tx, anchor, sales, strategy, tokens, out)
		})
		switch {
		case errors.Is(err, errNothingSold):
			return out, nil
		case errors.Is(err, errExtraMoved) && attempt < maxExtraRetries:
			continue
		case errors.Is(err, errExtraMoved):
			return nil, fmt.Errorf("%w: %w", errRaced, err)
		case err != nil:
			return nil, err
		}
		return out, nil
	}
}

// linesOf returns the lines of s: a purchase's one line on anchor, or a cart's.
func (s sale) linesOf(anchor int64) []cartLine {
	if s.isCart() {
		return s.lines
	}
	return []cartLine{{itemID: anchor, quantity: s.p.quantity}}
}

func (st store) writeSalesTx(ctx context.Context, tx *sql.Tx, anchor int64, sales []sale, strategy string,
	tokens map[int64]int64, out []saleResult) error {
	now := time.Now().UTC()
	items := []int64{anchor}
	for _, s := range sales {
		for _, l := range s.lines {
			items = append(items, l.itemID)
		}
	}
	slices.Sort(items)
	items = slices.Compact(items)
	give, err := st.expireHolds(ctx, tx, items)
	if err != nil {
		return err
	}
	// The other items, read under this transaction (SQLite: it holds the write lock).
	avail := make(map[int64]row, len(items))
	for _, id := range items {
		if id == anchor {
			continue
		}
		var r row
		err := tx.StmtContext(ctx, st.q.readItem).QueryRowContext(ctx, id).Scan(&r.Stock, &r.FenceToken)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			r.Stock, r.FenceToken = -1, -1 // gone: a catalogue reset since the cart read it
		case err != nil:
			return err
		default:
			r.Stock += give[id]
		}
		avail[id] = r
	}
	used := make(map[int64]int, len(items))
	kept := make([]bool, len(sales))
	for i, s := range sales {
		if !s.isCart() {
			used[anchor] += s.p.quantity
			kept[i] = true
			continue
		}
		if err := fitOthers(anchor, s.lines, avail, used, tokens); err != nil {
			out[i] = saleResult{err: err, short: errors.Is(err, ErrInsufficientStock)}
			continue
		}
		for _, l := range s.lines {
			used[l.itemID] += l.quantity
		}
		kept[i] = true
	}
	if used[anchor] == 0 {
		return errNothingSold
	}
	all := slices.Clone(items)
	for id := range give {
		all = append(all, id)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	cur := make(map[int64]int, len(all)) // each item's stock as the orders are recorded
	for _, id := range all {
		if g := give[id]; g > 0 {
			if err := st.giveBack(ctx, tx, id, g, now); err != nil {
				return err
			}
		}
		if used[id] == 0 {
			continue
		}
		left, err := st.guardedUpdate(ctx, tx, id, used[id], tokens[id], now)
		if err != nil {
			if id != anchor && (isDomain(err) || errors.Is(err, errRaced)) {
				return fmt.Errorf("%w: item %d: %w", errExtraMoved, id, err)
			}
			return err
		}
		cur[id] = left + used[id]
	}
	return st.recordSales(ctx, tx, anchor, sales, kept, strategy, tokens, cur, out, now)
}

// fitOthers checks a cart's lines other than the anchor against the stock read in the write's
// transaction (avail) beside what the sales before it use (used): a stale token is ErrLockLost,
// a vanished item ErrNotFound, short lines a *ShortLinesError naming each.
func fitOthers(anchor int64, lines []cartLine, avail map[int64]row, used map[int64]int, tokens map[int64]int64) error {
	var short []ShortLine
	for _, l := range lines {
		if l.itemID == anchor {
			continue
		}
		r := avail[l.itemID]
		switch {
		case r.FenceToken < 0:
			return fmt.Errorf("%w: item %d", ErrNotFound, l.itemID)
		case tokens[l.itemID] > 0 && r.FenceToken >= tokens[l.itemID]:
			return &staleFenceError{itemID: l.itemID, token: tokens[l.itemID], seen: r.FenceToken}
		}
		if left := r.Stock - used[l.itemID]; left < l.quantity {
			short = append(short, ShortLine{ItemID: l.itemID, Requested: l.quantity, Available: max(left, 0)})
		}
	}
	if len(short) > 0 {
		return &ShortLinesError{Lines: short}
	}
	return nil
}

// recordSales records the kept sales, in order, under one batch id, once every guarded update
// is done; cur holds each item's stock before them. Keys already taken give their units back.
func (st store) recordSales(ctx context.Context, tx *sql.Tx, anchor int64, sales []sale, kept []bool, strategy string,
	tokens map[int64]int64, cur map[int64]int, out []saleResult, now time.Time) error {
	batch := newBatchID()
	taken := make(map[int64]int)
	sold := 0
	insert := tx.StmtContext(ctx, st.q.insertOrder)
	for i, s := range sales {
		if !kept[i] {
			continue
		}
		if s.isCart() {
			res := make([]LineReceipt, len(s.lines))
			for j, l := range s.lines {
				res[j] = LineReceipt{ItemID: l.itemID, Quantity: l.quantity, Remaining: cur[l.itemID] - l.quantity, FenceToken: tokens[l.itemID]}
			}
			id, err := s.record(ctx, tx, res, now, batch)
			if errors.Is(err, errDuplicateKey) {
				out[i] = saleResult{err: errDuplicateKey}
				for _, l := range s.lines {
					taken[l.itemID] += l.quantity
				}
				continue
			}
			if err != nil {
				return err
			}
			for _, l := range s.lines {
				cur[l.itemID] -= l.quantity
			}
			out[i] = saleResult{cart: CartReceipt{OrderID: id, Lines: res, Strategy: strategy}}
			sold++
			continue
		}
		p, token := s.p, tokens[anchor]
		var key any
		if p.key != "" {
			key = p.key
		}
		var id int64
		err := insert.QueryRowContext(ctx, anchor, p.quantity, strategy, token, key, p.fingerprint,
			cur[anchor]-p.quantity, batch, p.degraded, now).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) { // the key is taken
			out[i] = saleResult{err: errDuplicateKey}
			taken[anchor] += p.quantity
			continue
		}
		if err != nil {
			return err
		}
		cur[anchor] -= p.quantity
		if _, err := tx.StmtContext(ctx, st.cq.insertLine).ExecContext(ctx, id, anchor, p.quantity, token, cur[anchor]); err != nil {
			return err
		}
		out[i] = saleResult{rec: Receipt{OrderID: id, ItemID: anchor, Quantity: p.quantity, Remaining: cur[anchor],
			FenceToken: token, Strategy: strategy, Degraded: p.degraded}}
		sold++
	}
	if sold == 0 {
		return errNothingSold // every key was taken: roll back
	}
	ids := make([]int64, 0, len(taken))
	for id := range taken {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if _, err := tx.StmtContext(ctx, st.q.giveBack).ExecContext(ctx, taken[id], now, id); err != nil {
			return err
		}
	}
	return nil
}
