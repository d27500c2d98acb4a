package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// The SQL of carts and holds. {now} is the database's clock in Unix milliseconds (nowMS): the
// expiry of a hold is decided by the one clock every process shares, never by a process's own.
const (
	// sqlReadAvail is what a sale may count on for an item: its stock plus the units of holds
	// that have expired but were not given back yet (the write transaction gives them back
	// first, expireHolds), and the stored fence token.
	sqlReadAvail = `SELECT stock + COALESCE((SELECT SUM(l.quantity) FROM hold_lines l JOIN holds h ON h.id = l.hold_id
		WHERE l.item_id = items.id AND h.status = 'active' AND h.expires_at_ms <= {now}), 0), fence_token
		FROM items WHERE id = ?`
	sqlInsertLine = `INSERT INTO order_lines (order_id, item_id, quantity, fence_token, remaining) VALUES (?, ?, ?, ?, ?)`
	// sqlExpire ends one expired hold, once: of two transactions (of any processes) that find
	// it expired, the second changes nothing and so gives nothing back.
	sqlExpire    = `UPDATE holds SET status = 'expired' WHERE id = ? AND status = 'active' AND expires_at_ms <= {now}`
	sqlHoldLines = `SELECT item_id, quantity, fence_token FROM hold_lines WHERE hold_id = ? ORDER BY item_id`
	// sqlExpiredOf lists the active holds past their expiry that have a line of one item.
	sqlExpiredOf = `SELECT h.id FROM hold_lines l JOIN holds h ON h.id = l.hold_id
		WHERE l.item_id = ? AND h.status = 'active' AND h.expires_at_ms <= {now}`
)

// nowMS is the database's clock in Unix milliseconds, in the dialect of pg.
func nowMS(pg bool) string {
	if pg {
		return `CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)`
	}
	return `CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)`
}

// dialect turns q into pg's dialect: the clock, then the placeholders.
func dialect(pg bool, q string) string {
	return rebind(pg, strings.ReplaceAll(q, "{now}", nowMS(pg)))
}

// cartStatements are the prepared statements of the sale path that carts and holds added
// (every sale reads the available stock and writes its order's line).
// They are prepared once, as the statements of the hot path (batch.go): every sale runs
// readAvail, expiredOf and insertLine.
type cartStatements struct {
	readAvail, insertLine, expiredOf *sql.Stmt
}

func prepareCartStatements(ctx context.Context, db *sql.DB, pg bool) (*cartStatements, error) {
	q := &cartStatements{}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{{&q.readAvail, sqlReadAvail}, {&q.insertLine, sqlInsertLine}, {&q.expiredOf, sqlExpiredOf}} {
		stmt, err := db.PrepareContext(ctx, dialect(pg, p.sql))
		if err != nil {
			for _, s := range []*sql.Stmt{q.readAvail, q.insertLine, q.expiredOf} {
				if s != nil {
					_ = s.Close()
				}
			}
			return nil, fmt.Errorf("inventory: prepare %q: %w", strings.Fields(p.sql)[0:3], err)
		}
		*p.dst = stmt
	}
	return q, nil
}

// conn is what the cart SQL runs on: a *sql.Tx, or the connection of a GORM transaction
// (tx.Statement.ConnPool).
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sql returns query in the store's dialect.
func (st store) sql(query string) string { return dialect(st.pg, query) }

// expireHolds ends the active holds that have a line of one of items and have expired by the
// database's clock (sqlExpire, once per hold whatever the processes), and returns the units
// they give back, by item: the caller adds them to the stock, in its one ascending pass over
// the items (so that row locks are taken in item order). Every sale, hold and cancel
// transaction calls it first for the items it touches: expiry needs no background job.
func (st store) expireHolds(ctx context.Context, c conn, items []int64) (map[int64]int, error) {
	var ids []int64
	for _, item := range items {
		var found []int64
		var err error
		if tx, ok := c.(*sql.Tx); ok { // the prepared statement: this runs in every sale
			found, err = queryStmt(ctx, tx.StmtContext(ctx, st.cq.expiredOf), item)
		} else {
			found, err = queryInts(ctx, c, st.sql(sqlExpiredOf), item)
		}
		if err != nil {
			return nil, err
		}
		ids = append(ids, found...)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids) // hold rows are locked in id order
	ids = slices.Compact(ids)
	give := make(map[int64]int)
	for _, id := range ids {
		if err := st.endHold(ctx, c, id, st.sql(sqlExpire), give); err != nil {
			return nil, err
		}
	}
	return give, nil
}

// endHold runs update (a conditional update of hold id's status, with id as its one
// argument) and, when it changed the row, adds the hold's units to give, by item.
func (st store) endHold(ctx context.Context, c conn, id int64, update string, give map[int64]int) error {
	res, err := c.ExecContext(ctx, update, id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	lines, err := st.holdLines(ctx, c, id)
	if err != nil {
		return err
	}
	for _, l := range lines {
		give[l.ItemID] += l.Quantity
	}
	return nil
}

// giveBack adds units back to item id's stock.
func (st store) giveBack(ctx context.Context, c conn, id int64, units int, now time.Time) error {
	_, err := c.ExecContext(ctx, st.sql(sqlGiveBack), units, now, id)
	return err
}

// giveBackAll gives back every item's units of give, ascending by item.
func (st store) giveBackAll(ctx context.Context, c conn, give map[int64]int, now time.Time) error {
	ids := make([]int64, 0, len(give))
	for id := range give {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := st.giveBack(ctx, c, id, give[id], now); err != nil {
			return err
		}
	}
	return nil
}

// holdLines returns hold id's lines, ascending by item.
func (st store) holdLines(ctx context.Context, c conn, id int64) ([]LineReceipt, error) {
	rows, err := c.QueryContext(ctx, st.sql(sqlHoldLines), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LineReceipt
	for rows.Next() {
		var l LineReceipt
		if err := rows.Scan(&l.ItemID, &l.Quantity, &l.FenceToken); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func queryInts(ctx context.Context, c conn, q string, args ...any) ([]int64, error) {
	rows, err := c.QueryContext(ctx, q, args...)
	return scanInts(rows, err)
}

func queryStmt(ctx context.Context, stmt *sql.Stmt, args ...any) ([]int64, error) {
	rows, err := stmt.QueryContext(ctx, args...)
	return scanInts(rows, err)
}

func scanInts(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// gormConn is the connection of a GORM transaction, for the cart SQL.
func gormConn(tx *gorm.DB) conn {
	c, _ := tx.Statement.ConnPool.(conn)
	return c
}

// cartLine is one merged line of a cart: an item and its total quantity.
type cartLine struct {
	itemID   int64
	quantity int
}

// writeCart is the guarded write of a cart or a hold, in ONE short transaction: first the
// units of expired holds on the cart's items are given back (expireHolds), then, in one pass
// ascending by item id (row locks in item order: two carts never deadlock on PostgreSQL), each
// give-back and each line's guarded update (fenced with tokens[item] when tokens is not nil),
// then record stores what the cart became (an order and its lines, or a hold and its lines).
// A line short of stock rolls everything back; the error is a *ShortLinesError naming every
// short line with what was available. A stale fence on any line (ErrLockLost), an unknown
// item (ErrNotFound) or a database error rolls everything back too.
func (st store) writeCart(ctx context.Context, lines []cartLine, tokens map[int64]int64,
	record func(ctx context.Context, tx *sql.Tx, res []LineReceipt, now time.Time) error) ([]LineReceipt, error) {
	var res []LineReceipt
	err := st.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now().UTC()
		ids := make([]int64, len(lines))
		for i, l := range lines {
			ids[i] = l.itemID
		}
		give, err := st.expireHolds(ctx, tx, ids)
		if err != nil {
			return err
		}
		all := slices.Clone(ids)
		for id := range give {
			all = append(all, id)
		}
		slices.Sort(all)
		all = slices.Compact(all)
		byItem := make(map[int64]int, len(lines))
		for _, l := range lines {
			byItem[l.itemID] = l.quantity
		}
		res = make([]LineReceipt, 0, len(lines))
		var short []ShortLine
		for _, id := range all {
			if g := give[id]; g > 0 {
				if err := st.giveBack(ctx, tx, id, g, now); err != nil {
					return err
				}
			}
			q, ok := byItem[id]
			if !ok {
				continue
			}
			token := tokens[id]
			left, err := st.guardedUpdate(ctx, tx, id, q, token, now)
			switch {
			case err == nil:
				res = append(res, LineReceipt{ItemID: id, Quantity: q, Remaining: left, FenceToken: token})
			case errors.Is(err, ErrSoldOut), errors.Is(err, ErrInsufficientStock):
				var r row
				if err := tx.StmtContext(ctx, st.q.readItem).QueryRowContext(ctx, id).Scan(&r.Stock, &r.FenceToken); err != nil {
					return err
				}
				short = append(short, ShortLine{ItemID: id, Requested: q, Available: max(r.Stock, 0)})
			default:
				return err
			}
		}
		if len(short) > 0 {
			return &ShortLinesError{Lines: short}
		}
		return record(ctx, tx, res, now)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// insertCartOrder stores the order of a cart (or a confirmed hold) and its lines, in tx: an
// order of one line carries that line's item, token and remaining stock, as a purchase's
// does; an order of several lines has item_id 0 and its quantity is the sum of its lines. It
// carries batch, the id of the write transaction (every order of one coalesced hold shares it). A
// key already taken is errDuplicateKey (the caller's transaction rolls back).
func (st store) insertCartOrder(ctx context.Context, tx *sql.Tx, lines []LineReceipt, strategy, key, fp string, degraded bool, now time.Time, batch int64) (int64, error) {
	var itemID, token int64
	remaining, total := 0, 0
	for _, l := range lines {
		total += l.Quantity
	}
	if len(lines) == 1 {
		itemID, token, remaining = lines[0].ItemID, lines[0].FenceToken, lines[0].Remaining
	}
	var k any
	if key != "" {
		k = key
	}
	var id int64
	err := tx.StmtContext(ctx, st.q.insertOrder).QueryRowContext(ctx, itemID, total, strategy, token, k, fp,
		remaining, batch, degraded, now).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errDuplicateKey
	}
	if err != nil {
		return 0, err
	}
	ins := tx.StmtContext(ctx, st.cq.insertLine)
	for _, l := range lines {
		if _, err := ins.ExecContext(ctx, id, l.ItemID, l.Quantity, l.FenceToken, l.Remaining); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// orderLines returns order id's lines, ascending by item.
func (st store) orderLines(ctx context.Context, c conn, id int64) ([]LineReceipt, error) {
	rows, err := c.QueryContext(ctx, st.sql(`SELECT item_id, quantity, fence_token, remaining FROM order_lines
		WHERE order_id = ? ORDER BY item_id`), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LineReceipt
	for rows.Next() {
		var l LineReceipt
		if err := rows.Scan(&l.ItemID, &l.Quantity, &l.FenceToken, &l.Remaining); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// readItems returns the available stock (sqlReadAvail) and fence of every item of ids, or an
// error wrapping ErrNotFound that names every unknown one.
func (st store) readItems(ctx context.Context, ids []int64) (map[int64]row, error) {
	out := make(map[int64]row, len(ids))
	var missing []string
	for _, id := range ids {
		r, err := st.readFast(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			missing = append(missing, strconv.FormatInt(id, 10))
		case err != nil:
			return nil, err
		default:
			out[id] = r
		}
	}
	if len(missing) > 0 {
		noun := "item"
		if len(missing) > 1 {
			noun = "items"
		}
		return nil, fmt.Errorf("%w: %s %s", ErrNotFound, noun, strings.Join(missing, ", "))
	}
	return out, nil
}

// orderLinesOf returns the lines of every order of ids, by order id, each ascending by item
// (one statement: the lines of a committed order never change).
func (st store) orderLinesOf(ctx context.Context, ids []int64) (map[int64][]LineReceipt, error) {
	out := make(map[int64][]LineReceipt, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := `SELECT order_id, item_id, quantity, remaining, fence_token FROM order_lines WHERE order_id IN (?` +
		strings.Repeat(", ?", len(ids)-1) + `) ORDER BY order_id, item_id`
	rows, err := st.sqlDB.QueryContext(ctx, st.sql(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var order int64
		var l LineReceipt
		if err := rows.Scan(&order, &l.ItemID, &l.Quantity, &l.Remaining, &l.FenceToken); err != nil {
			return nil, err
		}
		out[order] = append(out[order], l)
	}
	return out, rows.Err()
}
