package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/models"
)

// purchase is one validated purchase request, as the strategies see it.
type purchase struct {
	itemID      int64
	quantity    int
	work        time.Duration
	key         string // idempotency key; "" for none
	fingerprint string
	degraded    bool        // sold without the lock, Redis being unavailable (degraded.go)
	intercept   Interceptor // from the purchase's context (WithInterceptor); nil: none
	spent       *spent      // what it cost so far (Service.Purchase reports it); nil: not recorded
}

// row is what a strategy reads of an item.
type row struct {
	Stock      int
	FenceToken int64
}

// store holds the SQL of a purchase: the reads and the short write transactions. The SQL is
// the same on SQLite and PostgreSQL. Every write transaction does no slow work and has a
// deadline (writeTimeout). On SQLite it is BEGIN IMMEDIATE (models.Open sets
// _txlock=immediate); on PostgreSQL it runs at READ COMMITTED, where the guarded UPDATE waits
// for a concurrent writer of the row and then re-checks its WHERE on the row's newest version.
type store struct {
	db *gorm.DB
	// gate admits one write transaction of this process at a time, on SQLite only
	// (models.Backend.OneWriter). SQLite has one writer anyway; without the gate, concurrent
	// BEGIN IMMEDIATEs of one process wait in SQLite's busy handler, which sleeps 1, 2, 5,
	// 10... ms between tries, instead of in a queue. Writers of other processes still meet in
	// the busy handler. PostgreSQL locks rows: no gate, so writers of different items never
	// wait for each other. nil on PostgreSQL.
	gate chan struct{}
	// writeTimeout bounds a write transaction from BEGIN to COMMIT.
	writeTimeout time.Duration

	sqlDB *sql.DB         // db's pool, for the hand-written statements of the hot path
	q     *statements     // those statements, in db's dialect
	pg    bool            // the database is PostgreSQL (the dialect of the cart SQL)
	cq    *cartStatements // the statements carts and holds added (cart_store.go)
	hk    *sql.Stmt       // the lookup of a hold by its idempotency key (hold_keys.go)
}

func newStore(db *gorm.DB, writeTimeout time.Duration) (store, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return store{}, fmt.Errorf("inventory: %w", err)
	}
	be := models.BackendOfDB(db)
	q, err := prepareStatements(context.Background(), sqlDB, be == models.Postgres)
	if err != nil {
		return store{}, err
	}
	cq, err := prepareCartStatements(context.Background(), sqlDB, be == models.Postgres)
	if err != nil {
		q.close()
		return store{}, err
	}
	hk, err := sqlDB.PrepareContext(context.Background(), dialect(be == models.Postgres, sqlHoldByKey))
	if err != nil {
		q.close()
		return store{}, fmt.Errorf("inventory: prepare the hold key lookup: %w", err)
	}
	st := store{db: db, writeTimeout: writeTimeout, sqlDB: sqlDB, q: q, pg: be == models.Postgres, cq: cq, hk: hk}
	if be.OneWriter() {
		st.gate = make(chan struct{}, 1)
	}
	return st, nil
}

// read returns the item's available stock (its stock plus the units of expired holds not
// given back yet) and fence token, in a statement of its own (no transaction).
func (st store) read(ctx context.Context, itemID int64) (row, error) {
	return st.readFast(ctx, itemID)
}

// checkStock tells whether quantity can be sold from stock: nil, ErrSoldOut or
// ErrInsufficientStock.
func checkStock(itemID int64, stock, quantity int) error {
	switch {
	case stock <= 0:
		return &stockError{itemID: itemID, stock: stock, err: fmt.Errorf("%w: item %d", ErrSoldOut, itemID)}
	case stock < quantity:
		return &stockError{itemID: itemID, stock: stock,
			err: fmt.Errorf("%w: item %d has %d left, %d asked", ErrInsufficientStock, itemID, stock, quantity)}
	}
	return nil
}

// stockError is checkStock's refusal: it wraps ErrSoldOut or ErrInsufficientStock and keeps
// the stock it was decided on (a cart refused on its anchor's read names it as available).
type stockError struct {
	itemID int64
	stock  int
	err    error
}

func (e *stockError) Error() string { return e.err.Error() }
func (e *stockError) Unwrap() error { return e.err }

// writeComputed is the unconditional write of naive, local and lock: it sets the stock the
// caller computed from its earlier read, and inserts the order, in one short transaction.
func (st store) writeComputed(ctx context.Context, p purchase, strategy string, newStock int, token int64) (Receipt, error) {
	var rec Receipt
	err := st.tx(ctx, func(tx *gorm.DB) error {
		// The units of expired holds are first given back: the stock read counted them.
		give, err := st.expireHolds(ctx, gormConn(tx), []int64{p.itemID})
		if err != nil {
			return err
		}
		if err := st.giveBackAll(ctx, gormConn(tx), give, time.Now().UTC()); err != nil {
			return err
		}
		res := tx.Exec("UPDATE items SET stock = ?, updated_at = ? WHERE id = ?", newStock, time.Now().UTC(), p.itemID)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: item %d", ErrNotFound, p.itemID)
		}
		rec, err = insertOrder(tx, p, strategy, token, newStock)
		return err
	})
	return rec, err
}

func insertOrder(tx *gorm.DB, p purchase, strategy string, token int64, remaining int) (Receipt, error) {
	o := models.Order{
		ItemID:      p.itemID,
		Quantity:    p.quantity,
		Strategy:    strategy,
		FenceToken:  token,
		Fingerprint: p.fingerprint,
		Remaining:   remaining,
		Degraded:    p.degraded,
		BatchID:     newBatchID(),
	}
	if p.key != "" {
		key := p.key
		o.IdempotencyKey = &key
	}
	if err := tx.Create(&o).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return Receipt{}, errDuplicateKey
		}
		return Receipt{}, err
	}
	line := models.OrderLine{OrderID: o.ID, ItemID: o.ItemID, Quantity: o.Quantity, FenceToken: token, Remaining: remaining}
	if err := tx.Create(&line).Error; err != nil {
		return Receipt{}, err
	}
	return receiptOf(o, false), nil
}

func receiptOf(o models.Order, replayed bool) Receipt {
	return Receipt{
		OrderID:    o.ID,
		ItemID:     o.ItemID,
		Quantity:   o.Quantity,
		Remaining:  o.Remaining,
		FenceToken: o.FenceToken,
		Strategy:   o.Strategy,
		Degraded:   o.Degraded,
		Replayed:   replayed,
	}
}

// errDuplicateKey: another request (in another process) stored an order with the same
// idempotency key first; the transaction was rolled back and the caller replays that order.
var errDuplicateKey = errors.New("inventory: idempotency key already used")

// writeSlot waits for the write gate (SQLite only: one writer at a time per process) and
// returns the write's context: writeTimeout from now, whatever ctx does once the write has
// begun. done ends the deadline and frees the gate. A ctx that is already done gets nothing.
func (st store) writeSlot(ctx context.Context) (wctx context.Context, done func(), err error) {
	free := func() {}
	if st.gate != nil {
		select {
		case st.gate <- struct{}{}:
			free = func() { <-st.gate }
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		free()
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.writeTimeout)
	return wctx, func() { cancel(); free() }, nil
}

// tx runs fn in one short write transaction. Once begun, the transaction is not abandoned
// when ctx is cancelled (a client that hangs up must not leave a commit of unknown outcome),
// but it has a deadline of its own, writeTimeout, from BEGIN to COMMIT: a dead connection or
// a server that stopped answering cannot hold the purchase (and its item lock) for longer.
// Past the deadline the driver drops the statement (pgx: the connection is closed, so the
// server rolls the transaction back; SQLite: the statement is interrupted, except in the busy
// handler, which the busy timeout bounds instead) and tx returns an error wrapping
// ErrUnavailable. A ctx that is already done writes nothing.
//
// A COMMIT whose answer is lost (the connection broke after sending it) has an unknown
// outcome: the transaction may have committed. tx then returns errOutcomeUnknown (wrapping
// ErrUnavailable); it is never retried here, and a client resolves it by replaying its
// Idempotency-Key (Purchase already looks the key up once more before answering).
func (st store) tx(ctx context.Context, fn func(tx *gorm.DB) error) (err error) {
	wctx, done, err := st.writeSlot(ctx)
	if err != nil {
		return err
	}
	defer done()
	defer func() { err = st.deadlineErr(wctx, err) }()
	tx := st.db.WithContext(wctx).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback().Error
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true // from here on, a rollback is the server's decision
	if err := tx.Commit().Error; err != nil {
		return commitErr(err)
	}
	return nil
}

// deadlineErr is the error of a write transaction whose deadline (wctx's) has passed: err
// becomes ErrUnavailable, not retried.
func (st store) deadlineErr(wctx context.Context, err error) error {
	if err != nil && wctx.Err() != nil && !isDomain(err) {
		// %v: past its deadline the purchase is not retried, even after a busy error.
		return fmt.Errorf("%w: database: write transaction exceeded its %s deadline, rolled back: %v",
			ErrUnavailable, st.writeTimeout, err)
	}
	return err
}

// commitErr is the error of a failed COMMIT: a lost answer (the connection broke, not busy)
// leaves the outcome unknown.
func commitErr(err error) error {
	if models.IsUnavailable(err) && !models.IsBusy(err) {
		return fmt.Errorf("%w: %w", errOutcomeUnknown, err)
	}
	return err
}

// errOutcomeUnknown: the COMMIT was sent and its answer lost; the purchase may or may not
// have been written.
var errOutcomeUnknown = fmt.Errorf("%w: database: the commit's answer was lost, its outcome is unknown "+
	"(replay the request with its Idempotency-Key to learn it)", ErrUnavailable)

// orderByKey returns the order stored under an idempotency key, if any (the fields a receipt
// and the fingerprint check need), with a prepared statement: it runs for every purchase that
// has a key, and GORM's Find showed in the profile. It has the write's deadline (writeTimeout)
// as readFast has: a buyer's request does not wait out a database that hangs.
func (st store) orderByKey(ctx context.Context, key string) (models.Order, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, st.writeTimeout)
	defer cancel()
	var o models.Order
	err := st.q.orderByKey.QueryRowContext(rctx, key).Scan(&o.ID, &o.ItemID, &o.Quantity, &o.Strategy,
		&o.FenceToken, &o.Fingerprint, &o.Remaining, &o.Degraded)
	if errors.Is(err, sql.ErrNoRows) {
		return models.Order{}, false, nil
	}
	if err != nil {
		return models.Order{}, false, st.readErr(ctx, rctx, err, "the lookup of an idempotency key")
	}
	k := key
	o.IdempotencyKey = &k
	return o, true, nil
}
