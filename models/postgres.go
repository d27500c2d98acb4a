package models

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// advisoryLockKey is the PostgreSQL advisory lock that serializes the migration and the demo
// seed of every storefront process sharing one database (an arbitrary constant: "stockgrd").
const advisoryLockKey int64 = 0x73746f636b677264

// openPostgres opens the PostgreSQL database at url with pgx (through database/sql, as GORM
// uses it) and migrates the schema.
//
// Every connection runs with statement_timeout = o.statementTimeout (and
// idle_in_transaction_session_timeout twice that, with TCP keepalives every 30s: DESIGN §3.6),
// so a statement that
// waits for a row lock or runs longer is cancelled by the server, and with the default
// isolation, READ COMMITTED (the guard's conditional UPDATE re-checks its WHERE on the row's
// newest version after waiting for a concurrent writer: see docs/operations.md, "Scale out"). A connect_timeout in url
// wins; otherwise a connection attempt gives up after 5s. Parameters in url (sslmode,
// application_name, statement_timeout...) win over these defaults.
func openPostgres(ctx context.Context, url string, o options) (*gorm.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("models: bad PostgreSQL URL: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if _, ok := cfg.RuntimeParams["statement_timeout"]; !ok {
		cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(o.statementTimeout.Milliseconds(), 10)
	}
	// A session left inside a transaction by a process that stopped answering (a lost machine,
	// a frozen process) keeps its row locks: the server ends it once it sits idle inside the
	// transaction for the write deadline (two statement timeouts, which no live storefront's
	// transaction outlasts), and TCP keepalives find a peer that is gone while the session is
	// idle between transactions (the server's default waits two hours before its first probe).
	for name, v := range map[string]string{
		"idle_in_transaction_session_timeout": strconv.FormatInt(2*o.statementTimeout.Milliseconds(), 10),
		"tcp_keepalives_idle":                 "30",
		"tcp_keepalives_interval":             "10",
		"tcp_keepalives_count":                "3",
	} {
		if _, ok := cfg.RuntimeParams[name]; !ok {
			cfg.RuntimeParams[name] = v
		}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "stockguard"
	}
	sqlDB := o.openDBOf(stdlib.GetConnector(*cfg))
	sqlDB.SetMaxOpenConns(o.maxOpenConns)
	sqlDB.SetMaxIdleConns(o.maxOpenConns)
	// Connections are recycled now and then, so that a pool follows a failover or a
	// connection pooler's rebalancing.
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	db, err := openGorm(postgres.New(postgres.Config{Conn: sqlDB}), o)
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("models: open PostgreSQL %s@%s:%d/%s: %w", cfg.User, cfg.Host, cfg.Port, cfg.Database, err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("models: connect to PostgreSQL %s@%s:%d/%s: %w", cfg.User, cfg.Host, cfg.Port, cfg.Database, err)
	}
	if err := migrate(ctx, db); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("models: migrate PostgreSQL %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	o.logger.Debug("database open", "backend", Postgres, "host", cfg.Host, "port", cfg.Port, "database", cfg.Database,
		"pool", o.maxOpenConns, "statement_timeout", o.statementTimeout)
	return db, nil
}

// serialize makes the rest of the transaction tx run alone among the storefront processes
// sharing the database: on PostgreSQL it takes a transaction-scoped advisory lock (released
// by COMMIT or ROLLBACK, so a crashed process cannot leave it behind); on SQLite the
// immediate transaction already holds the database's one write lock.
//
// The wait for the lock may last another process's whole migration or seed (instances that
// start at once on a fresh database, on a loaded machine): the transaction's statements get
// SerializeTimeout (SET LOCAL, this transaction only) instead of the session's statement
// timeout, which is for purchases. A 5s statement timeout once cancelled a waiting instance's
// migration, and the instance did not start.
func serialize(tx *gorm.DB) error {
	if BackendOfDB(tx) != Postgres {
		return nil
	}
	// The session's idle-in-transaction timeout (twice the statement timeout) is for a request
	// that left its transaction open; a migration's own pauses between statements (GORM reads
	// the catalogue, a loaded machine) are not that: under make test's load a 400 ms one ended
	// a migration half-way (models' TestPostgresErrorClassification). Both bounds are this one.
	for _, setting := range []string{"statement_timeout", "idle_in_transaction_session_timeout"} {
		if err := tx.Exec(fmt.Sprintf("SET LOCAL %s = %d", setting, SerializeTimeout.Milliseconds())).Error; err != nil {
			return err
		}
	}
	return tx.Exec("SELECT pg_advisory_xact_lock(?)", advisoryLockKey).Error
}

// SerializeTimeout bounds each statement of a migration or seed on PostgreSQL, the wait for
// the other processes' included (serialize).
const SerializeTimeout = 2 * time.Minute
