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

// The hand-written statements of the hot path, in portable SQL (SQLite 3.35+ and PostgreSQL
// both have UPDATE ... RETURNING and INSERT ... ON CONFLICT DO NOTHING RETURNING). They run
// through database/sql, without GORM's statement building: the profile of the hot item showed
// it (docs/measured.md, "What the profile showed").
const (
	sqlReadItem    = `SELECT stock, fence_token FROM items WHERE id = ?`
	sqlInsertOrder = `INSERT INTO "orders" (item_id, quantity, strategy, fence_token, idempotency_key, fingerprint,
		remaining, batch_id, degraded, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`
	// sqlGuardedUpdate is the database guard: the units are taken only when they are there.
	sqlGuardedUpdate = `UPDATE items SET stock = stock - ?, updated_at = ?
		WHERE id = ? AND stock >= ? RETURNING stock`
	// sqlFencedUpdate is the guard with the fence (Kleppmann's fencing token): it also requires
	// fence_token < token and sets fence_token = token, so a holder whose lock was taken over by
	// a newer token writes nothing. The comparison is strict: each hold writes once (a retry
	// takes a new lock and so a new token), and a token equal to the stored one can only be a
	// twin, issued again after Redis lost its counter while the first holder had not written
	// yet (the floor, read from this row, cannot know of a token issued but not yet written).
	// The twin that writes second is refused, so no two writes ever carry one token.
	sqlFencedUpdate = `UPDATE items SET stock = stock - ?, fence_token = ?, updated_at = ?
		WHERE id = ? AND stock >= ? AND fence_token < ? RETURNING stock`
	// sqlGiveBack returns the units of the purchases of a write whose idempotency key was
	// already taken (their orders were not inserted).
	sqlGiveBack   = `UPDATE items SET stock = stock + ?, updated_at = ? WHERE id = ?`
	sqlOrderByKey = `SELECT id, item_id, quantity, strategy, fence_token, fingerprint, remaining, degraded
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

// writeOne is the guarded write of one purchase (guard, lock+guard one purchase per hold, the
// degraded sale, redis-stock+guard): the package's one write (writeSales) of a batch of one,
// fenced when token > 0.
func (st store) writeOne(ctx context.Context, p purchase, strategy string, token int64) (Receipt, error) {
	res, err := st.writeSales(ctx, p.itemID, []sale{{p: p}}, strategy, map[int64]int64{p.itemID: token})
	if err != nil {
		return Receipt{}, err
	}
	return res[0].rec, res[0].err
}

// errNothingSold rolls back a write whose every purchase found its idempotency key taken.
var errNothingSold = errors.New("inventory: every idempotency key of the write was taken")

// guardedUpdate runs one guarded update of writeSales inside tx and returns the stock it
// left. When it changes nothing, the item read right after, in the same transaction, tells
// why (refusal); at READ COMMITTED a row that would pass now is updated again, twice at most.
func (st store) guardedUpdate(ctx context.Context, tx *sql.Tx, itemID int64, quantity int, token int64, now time.Time) (int, error) {
	for attempt := 0; ; attempt++ {
		var res *sql.Row
		if token > 0 {
			res = tx.StmtContext(ctx, st.q.fencedUpdate).QueryRowContext(ctx, quantity, token, now, itemID, quantity, token)
		} else {
			res = tx.StmtContext(ctx, st.q.guardedUpdate).QueryRowContext(ctx, quantity, now, itemID, quantity)
		}
		var left int
		err := res.Scan(&left)
		if !errors.Is(err, sql.ErrNoRows) {
			return left, err
		}
		var r row
		err = tx.StmtContext(ctx, st.q.readItem).QueryRowContext(ctx, itemID).Scan(&r.Stock, &r.FenceToken)
		if errors.Is(err, sql.ErrNoRows) { // gone (a catalogue reset since the purchase read it)
			return 0, fmt.Errorf("%w: item %d", ErrNotFound, itemID)
		}
		if err != nil {
			return 0, err
		}
		if err := refusal(r, itemID, quantity, token); !errors.Is(err, errRaced) || attempt == 2 {
			return 0, err
		}
	}
}

// refusal is the one explanation of a guarded update that changed nothing, from the item r
// read right after it, for quantity units and the fence token (0: no fence):
//   - the database has seen token or a newer one: the holder's lock was taken over (or its
//     token is a twin), so its write is refused: a staleFenceError, which wraps ErrLockLost
//     with both tokens (the service retries it once, under a new lock);
//   - the stock is short: ErrSoldOut or ErrInsufficientStock (for a coalesced hold, which
//     admitted its batch on the stock it read, the stock moved under the hold: another writer
//     without the lock);
//   - neither: errRaced.
func refusal(r row, itemID int64, quantity int, token int64) error {
	if token > 0 && r.FenceToken >= token {
		return &staleFenceError{itemID: itemID, token: token, seen: r.FenceToken}
	}
	if err := checkStock(itemID, r.Stock, quantity); err != nil {
		return err
	}
	return fmt.Errorf("%w: guarded update of item %d changed nothing (stock %d, fence %d)",
		errRaced, itemID, r.Stock, r.FenceToken)
}

// errRaced: the row refused a guarded update, and a read right after finds it would pass.
// Only at READ COMMITTED (PostgreSQL), where each statement sees the rows committed before it
// started: a write that committed between the two statements (an unguarded write of naive,
// local or lock raising the stock) explains it. Not reachable in an SQLite transaction, which
// holds the write lock.
var errRaced = errors.New("inventory: the row changed between the guarded update and its explanation")

// statements are the hand-written statements of the hot path, prepared once per store in the
// database's dialect (database/sql keeps one prepared copy per connection: SQLite through
// mattn/go-sqlite3 has no statement cache of its own, and preparing each statement anew showed
// in the profile).
type statements struct {
	readItem, insertOrder, guardedUpdate, fencedUpdate, giveBack, orderByKey *sql.Stmt
}

func prepareStatements(ctx context.Context, db *sql.DB, pg bool) (*statements, error) {
	q := &statements{}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{{&q.readItem, sqlReadItem}, {&q.insertOrder, sqlInsertOrder}, {&q.guardedUpdate, sqlGuardedUpdate},
		{&q.fencedUpdate, sqlFencedUpdate}, {&q.giveBack, sqlGiveBack}, {&q.orderByKey, sqlOrderByKey}} {
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
	for _, s := range []*sql.Stmt{q.readItem, q.insertOrder, q.guardedUpdate, q.fencedUpdate, q.giveBack, q.orderByKey} {
		if s != nil {
			_ = s.Close()
		}
	}
}

// readFast is read without GORM: the item's available stock (its stock plus the units of
// expired holds not given back yet: sqlReadAvail) and fence token, or ErrNotFound.
//
// The read has the write's deadline (writeTimeout): an item's worker reads under its own
// context, which never ends, and a database that hangs (sockets open, no answer) would
// otherwise keep the read, the hold and every buyer queued behind it waiting for as long as
// the hang lasts. Past it, ErrUnavailable.
func (st store) readFast(ctx context.Context, itemID int64) (row, error) {
	rctx, cancel := context.WithTimeout(ctx, st.writeTimeout)
	defer cancel()
	var r row
	err := st.cq.readAvail.QueryRowContext(rctx, itemID).Scan(&r.Stock, &r.FenceToken)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, fmt.Errorf("%w: item %d", ErrNotFound, itemID)
	}
	return r, st.readErr(ctx, rctx, err, fmt.Sprintf("a read of item %d", itemID))
}

// readErr is the error of a read bounded by writeTimeout (rctx, derived from ctx): past that
// deadline, with ctx still live, ErrUnavailable naming what was read; otherwise err.
func (st store) readErr(ctx, rctx context.Context, err error, what string) error {
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%w: database: %s exceeded its %s deadline: %v", ErrUnavailable, what, st.writeTimeout, err)
	}
	return err
}

// sqlTx is tx over database/sql, for the hand-written statements of the guarded write: the same
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
