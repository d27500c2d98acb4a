package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// Option changes how Open opens the database.
type Option func(*options)

type options struct {
	logger           *slog.Logger
	maxOpenConns     int
	busyTimeout      time.Duration
	statementTimeout time.Duration
	openDB           func(driver.Connector) *sql.DB // nil: sql.OpenDB, the driver as it is
	sqliteDriver     string                         // WithSQLiteDriver; "": mattn/go-sqlite3's
}

// WithLogger makes Open and GORM log through l: statements slower than 1s at Warn, failed
// statements at Debug, GORM's own errors at Error except while it opens the database (that
// error is Open's to return, not to log). Default (and for nil): discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithMaxOpenConns bounds the connection pool. Default (and for n < 1): max(4, GOMAXPROCS)
// for an SQLite file, DefaultPostgresPool for PostgreSQL. An in-memory SQLite database always
// uses one connection.
func WithMaxOpenConns(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxOpenConns = n
		}
	}
}

// WithBusyTimeout sets how long an SQLite statement waits for another connection's write lock
// before it fails with SQLITE_BUSY. Default (and for d < 1ms): the statement timeout. Ignored
// by PostgreSQL.
func WithBusyTimeout(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Millisecond {
			o.busyTimeout = d
		}
	}
}

// WithStatementTimeout bounds every statement: on PostgreSQL it is the session's
// statement_timeout (the server cancels a statement that runs, or waits for a row lock, longer:
// SQLSTATE 57014, which IsUnavailable reports); on SQLite, where a statement only ever waits
// for the write lock, it is the busy timeout unless WithBusyTimeout is given too. Default (and
// for d < 1ms): 5s.
func WithStatementTimeout(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Millisecond {
			o.statementTimeout = d
		}
	}
}

// WithOpenDB makes Open open the connection pool with open, given the driver's connector
// (mattn/go-sqlite3's or pgx's, configured as Open configures them), instead of
// sql.OpenDB: a wrapper such as otelsql sees every statement, the hot path's prepared ones
// and its *sql.Tx included, which a GORM plugin would not. Default (and for nil):
// sql.OpenDB.
func WithOpenDB(open func(driver.Connector) *sql.DB) Option {
	return func(o *options) {
		if open != nil {
			o.openDB = open
		}
	}
}

// openDBOf opens the pool over c with o's opener.
func (o options) openDBOf(c driver.Connector) *sql.DB {
	if o.openDB != nil {
		return o.openDB(c)
	}
	return sql.OpenDB(c)
}

// sqliteDriverOf returns the SQLite driver Open uses: the one registered under
// WithSQLiteDriver's name, or mattn/go-sqlite3's.
func (o options) sqliteDriverOf() (driver.Driver, error) {
	if o.sqliteDriver == "" {
		return &sqlite3.SQLiteDriver{}, nil
	}
	db, err := sql.Open(o.sqliteDriver, "")
	if err != nil {
		return nil, fmt.Errorf("models: SQLite driver %q: %w", o.sqliteDriver, err)
	}
	defer db.Close()
	return db.Driver(), nil
}

// dsnConnector is an SQLite driver's connector for one DSN (its driver has none of its own).
type dsnConnector struct {
	dsn string
	drv driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

// WithSQLiteDriver opens an SQLite database through the database/sql driver registered
// under name instead of mattn/go-sqlite3's "sqlite3": it is the simulator's seam (package
// sim), whose driver wraps that one to hold, slow or fail a process's statements and to drive
// the database's clock. The driver must accept the DSN Open builds (see Open). Default (and for
// ""): "sqlite3". Ignored by PostgreSQL.
func WithSQLiteDriver(name string) Option {
	return func(o *options) { o.sqliteDriver = name }
}

// DefaultPostgresPool is the connection pool size of a PostgreSQL database when
// WithMaxOpenConns is not given: enough for the concurrent short write transactions of one
// storefront (each holds a connection for a few milliseconds), small enough that a dozen
// storefronts stay under the server's default max_connections of 100.
const DefaultPostgresPool = 8

// Open opens the database dsn and migrates its schema: PostgreSQL when dsn is a postgres:// or
// postgresql:// URL (see BackendOf), else SQLite, creating the file if needed.
//
// For PostgreSQL, see openPostgres: pgx through gorm.io/driver/postgres, a statement timeout,
// and a migration serialized across processes by a transaction-scoped advisory lock.
//
// For SQLite, dsn is a file path, a "file:" URI, or ":memory:". Every connection runs in WAL mode with
// synchronous=NORMAL, a busy timeout, foreign keys on, and BEGIN IMMEDIATE for every
// transaction (_txlock=immediate), so a transaction holds the write lock from its start and a
// read-then-write transaction cannot fail half-way with SQLITE_BUSY. Parameters already in
// dsn win over these defaults. ":memory:" gives a private database on a single connection,
// for tests. Several processes may open one fresh file at the same moment: the migration runs
// in one immediate transaction and is idempotent.
//
// Open fails if the file cannot be opened or the migration fails. The caller closes the
// database with Close.
func Open(ctx context.Context, dsn string, opts ...Option) (*gorm.DB, error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.statementTimeout == 0 {
		o.statementTimeout = 5 * time.Second
	}
	if BackendOf(dsn) == Postgres {
		if o.maxOpenConns == 0 {
			o.maxOpenConns = DefaultPostgresPool
		}
		return openPostgres(ctx, dsn, o)
	}
	if o.maxOpenConns == 0 {
		o.maxOpenConns = max(4, runtime.GOMAXPROCS(0))
	}
	if o.busyTimeout == 0 {
		o.busyTimeout = o.statementTimeout
	}
	full, memory, err := buildDSN(dsn, o.busyTimeout)
	if err != nil {
		return nil, err
	}
	// A fresh file that several processes open at once can answer SQLITE_BUSY while one of
	// them switches it to WAL (that step does not wait on the busy handler): retry.
	var db *gorm.DB
	err = retryBusy(ctx, func() error {
		var err error
		db, err = openOnce(ctx, full, memory, o)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("models: open %s: %w", dsn, err)
	}
	o.logger.Debug("database open", "dsn", dsn, "memory", memory)
	return db, nil
}

// openGorm opens GORM over d with the configuration of both backends. Its logger keeps GORM's
// own Error lines at Debug until gorm.Open has returned (see gormLogger).
func openGorm(d gorm.Dialector, o options) (*gorm.DB, error) {
	l := gormLogger{log: o.logger, slow: time.Second}
	opening := l
	opening.opening = true
	db, err := gorm.Open(d, &gorm.Config{
		SkipDefaultTransaction: true, // transactions are explicit and short
		TranslateError:         true, // unique violations become gorm.ErrDuplicatedKey
		Logger:                 opening,
	})
	if err != nil {
		return nil, err
	}
	db.Logger = l
	return db, nil
}

func openOnce(ctx context.Context, full string, memory bool, o options) (*gorm.DB, error) {
	drv, err := o.sqliteDriverOf()
	if err != nil {
		return nil, err
	}
	pool := o.openDBOf(dsnConnector{dsn: full, drv: drv})
	db, err := openGorm(sqlite.New(sqlite.Config{Conn: pool}), o)
	if err != nil {
		_ = pool.Close()
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if memory {
		// One connection that is never recycled: closing it would drop the database.
		sqlDB.SetMaxOpenConns(1)
		sqlDB.SetMaxIdleConns(1)
	} else {
		sqlDB.SetMaxOpenConns(o.maxOpenConns)
		sqlDB.SetMaxIdleConns(o.maxOpenConns)
	}
	sqlDB.SetConnMaxLifetime(0)
	sqlDB.SetConnMaxIdleTime(0)
	if err := migrate(ctx, db); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	return db, nil
}

// Close closes the database's connection pool.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

var memSeq atomic.Int64

// buildDSN adds the pragmas as mattn/go-sqlite3 DSN parameters, keeping any the caller set.
func buildDSN(dsn string, busy time.Duration) (full string, memory bool, err error) {
	if strings.TrimSpace(dsn) == "" {
		return "", false, errors.New("models: empty database path")
	}
	path, rawQuery, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", false, fmt.Errorf("models: bad parameters in %q: %w", dsn, err)
	}
	memory = path == ":memory:" || path == "file::memory:" || q.Get("mode") == "memory"
	set := func(k, v string) {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	if memory && (path == ":memory:" || path == "file::memory:") {
		// A named private database, so that the name cannot collide with another Open's.
		path = "file:stockguard-mem-" + strconv.FormatInt(memSeq.Add(1), 10)
		q.Set("mode", "memory")
	}
	if !memory {
		set("_journal_mode", "WAL")
		set("_synchronous", "NORMAL")
	}
	set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	set("_foreign_keys", "1")
	set("_txlock", "immediate")
	return path + "?" + q.Encode(), memory, nil
}

// migrate creates the schema with GORM's AutoMigrate in one transaction that runs alone
// (serialize: SQLite's immediate transaction, PostgreSQL's advisory lock): processes that
// migrate one database at once run one after the other, and the later ones find the tables
// and indexes in place and change nothing. PostgreSQL's DDL is transactional, so a migration
// that fails half-way leaves nothing behind.
//
// The schema: items (unique sku), orders (unique idempotency_key, NULLs distinct, so that
// INSERT ... ON CONFLICT (idempotency_key) DO NOTHING RETURNING works on both backends),
// order_lines (one per order and item), holds and hold_lines. Orders without a line (stored
// before lines existed, or by a process of an older version since) get their one line from
// the order's own columns: an INSERT ... SELECT of the orders that have none, so running it
// again adds nothing.
func migrate(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := serialize(tx); err != nil {
			return err
		}
		if err := tx.AutoMigrate(&Item{}, &Order{}, &OrderLine{}, &Hold{}, &HoldLine{}); err != nil {
			return err
		}
		return tx.Exec(sqlBackfillLines).Error
	})
}

// sqlBackfillLines gives every order without a line its one line (migrate).
const sqlBackfillLines = `INSERT INTO order_lines (order_id, item_id, quantity, fence_token, remaining)
	SELECT o.id, o.item_id, o.quantity, o.fence_token, o.remaining FROM orders o
	WHERE NOT EXISTS (SELECT 1 FROM order_lines l WHERE l.order_id = o.id)`

// retryBusy runs fn again while it fails with SQLITE_BUSY, up to 10 times with a growing pause.
func retryBusy(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if err = fn(); err == nil || !IsBusy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt+1) * 10 * time.Millisecond):
		}
	}
	return err
}
