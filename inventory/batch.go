package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The statements of a coalesced hold's write, in portable SQL (SQLite 3.35+ and PostgreSQL both
// have INSERT ... ON CONFLICT DO NOTHING RETURNING). They run through database/sql, without
// GORM's statement building: the profile of the hot item showed it (see README). The lookup of
// an idempotency key, done for every purchase that has one, is here too.
const (
	sqlReadItem    = `SELECT stock, fence_token FROM items WHERE id = ?`
	sqlInsertOrder = `INSERT INTO "orders" (item_id, quantity, strategy, fence_token, idempotency_key, fingerprint,
		remaining, batch_id, degraded, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`
	sqlGuardUpdate = `UPDATE items SET stock = stock - ?, updated_at = ?
		WHERE id = ? AND stock >= ? RETURNING stock`
	sqlBatchUpdate = `UPDATE items SET stock = stock - ?, fence_token = ?, updated_at = ?
		WHERE id = ? AND stock >= ? AND fence_token < ? RETURNING stock`
	sqlFixRemaining = `UPDATE orders SET remaining = remaining + ? WHERE batch_id = ? AND item_id = ?`
	sqlOrderByKey   = `SELECT id, item_id, quantity, strategy, fence_token, fingerprint, remaining, degraded
		FROM orders WHERE idempotency_key = ? LIMIT 1`
)

// rebind turns the ? placeholders of q into PostgreSQL's $1, $2... when pg is set. (The
// statements above hold no ? inside literals.)
func rebind(pg bool, q string) string {
	if !pg {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// newBatchID returns a positive id for one write transaction: the orders it stores carry it.
func newBatchID() int64 { return rand.Int64N(1<<62) + 1 }

// errStockMoved: the hold's guarded update found less stock than the hold read (another
// writer, without the lock: guard or naive on the same item). The transaction was rolled back;
// the worker reads again and admits again under the same hold.
var errStockMoved = errors.New("inventory: the stock changed under the hold")

// batchResult is one purchase's outcome in a hold's write.
type batchResult struct {
	rec Receipt
	err error // errDuplicateKey when its idempotency key was already taken
}

// writeBatch writes the purchases ps of one hold of itemID in ONE transaction: the orders
// first (one row each; a row whose idempotency key is already taken is left out, and its
// purchase gets errDuplicateKey, which Service.Purchase turns into the replay of the key's
// order), then one guarded, fenced update of the stock by the total inserted. stock is what
// the hold read. When the update changes nothing, the transaction is rolled back and the error
// tells why: ErrLockLost (a newer token wrote the item: this hold's lock was lost) or
// errStockMoved.
func (st store) writeBatch(ctx context.Context, itemID int64, stock int, ps []purchase, strategy string, token int64) ([]batchResult, error) {
	out := make([]batchResult, len(ps))
	err := st.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now().UTC()
		batch := newBatchID()
		total := 0
		insert := tx.StmtContext(ctx, st.q.insertOrder)
		for i, p := range ps {
			var key any
			if p.key != "" {
				key = p.key
			}
			remaining := stock - total - p.quantity
			var id int64
			err := insert.QueryRowContext(ctx, itemID, p.quantity, strategy, token, key, p.fingerprint,
				remaining, batch, false, now).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) { // the key is taken
				out[i] = batchResult{err: errDuplicateKey}
				continue
			}
			if err != nil {
				return err
			}
			total += p.quantity
			out[i] = batchResult{rec: Receipt{OrderID: id, ItemID: itemID, Quantity: p.quantity, Remaining: remaining,
				FenceToken: token, Strategy: strategy}}
		}
		if total == 0 {
			return nil // every key was taken: nothing to sell
		}
		var left int
		err := tx.StmtContext(ctx, st.q.batchUpdate).QueryRowContext(ctx, total, token, now, itemID, total, token).Scan(&left)
		if errors.Is(err, sql.ErrNoRows) {
			var r row
			err := tx.StmtContext(ctx, st.q.readItem).QueryRowContext(ctx, itemID).Scan(&r.Stock, &r.FenceToken)
			if errors.Is(err, sql.ErrNoRows) { // gone since the hold read it (a catalogue reset)
				return fmt.Errorf("%w: item %d", ErrNotFound, itemID)
			}
			if err != nil {
				return err
			}
			if r.FenceToken >= token {
				return &staleFenceError{itemID: itemID, token: token, seen: r.FenceToken}
			}
			return errStockMoved
		}
		if err != nil {
			return err
		}
		// Another writer changed the stock since the hold read it, and enough is still there:
		// the sale stands, the remaining stock each order recorded moves by the difference.
		if delta := left - (stock - total); delta != 0 {
			if _, err := tx.StmtContext(ctx, st.q.fixRemaining).ExecContext(ctx, delta, batch, itemID); err != nil {
				return err
			}
			for i := range out {
				if out[i].err == nil {
					out[i].rec.Remaining += delta
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// statements are the hand-written statements of the hot path, prepared once per store in the
// database's dialect (database/sql keeps one prepared copy per connection: SQLite through
// mattn/go-sqlite3 has no statement cache of its own, and preparing each statement anew showed
// in the profile).
type statements struct {
	readItem, insertOrder, guardUpdate, batchUpdate, fixRemaining, orderByKey *sql.Stmt
}

func prepareStatements(ctx context.Context, db *sql.DB, pg bool) (*statements, error) {
	q := &statements{}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{{&q.readItem, sqlReadItem}, {&q.insertOrder, sqlInsertOrder}, {&q.guardUpdate, sqlGuardUpdate}, {&q.batchUpdate, sqlBatchUpdate},
		{&q.fixRemaining, sqlFixRemaining}, {&q.orderByKey, sqlOrderByKey}} {
		stmt, err := db.PrepareContext(ctx, rebind(pg, p.sql))
		if err != nil {
			q.close()
			return nil, fmt.Errorf("inventory: prepare %q: %w", strings.Fields(p.sql)[0:3], err)
		}
		*p.dst = stmt
	}
	return q, nil
}

// close closes the prepared statements (after a failed prepare; otherwise they live as long as
// the database handle, which closes them with its connections, so that a Service keeps working
// after Close for the strategies without workers).
func (q *statements) close() {
	for _, s := range []*sql.Stmt{q.readItem, q.insertOrder, q.guardUpdate, q.batchUpdate, q.fixRemaining, q.orderByKey} {
		if s != nil {
			_ = s.Close()
		}
	}
}

// readFast is read without GORM: the item's stock and fence token, or ErrNotFound.
func (st store) readFast(ctx context.Context, itemID int64) (row, error) {
	var r row
	err := st.q.readItem.QueryRowContext(ctx, itemID).Scan(&r.Stock, &r.FenceToken)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, fmt.Errorf("%w: item %d", ErrNotFound, itemID)
	}
	return r, err
}

// sqlTx is tx over database/sql, for the hand-written statements of a hold's write: the same
// write gate (SQLite only), the same deadline (writeTimeout, from BEGIN to COMMIT, whatever
// ctx does once begun), the same errors (past the deadline: ErrUnavailable; a COMMIT whose
// answer is lost: errOutcomeUnknown, never retried here).
func (st store) sqlTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	wctx, done, err := st.writeSlot(ctx)
	if err != nil {
		return err
	}
	defer done()
	defer func() { err = st.deadlineErr(wctx, err) }()
	tx, err := st.sqlDB.BeginTx(wctx, nil)
	if err != nil {
		return err
	}
	if err := fn(wctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil { // from here on, a rollback is the server's decision
		return commitErr(err)
	}
	return nil
}
