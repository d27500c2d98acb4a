package models

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"
	"gorm.io/gorm"
)

// Backend names the database engine behind a *gorm.DB. The SQL of the storefront is the same
// on both; what differs (pragmas, the per-process write gate, how migrations are serialized,
// which errors mean "retry" or "unavailable") is decided here, from this value.
type Backend string

// The backends Open supports.
const (
	SQLite   Backend = "sqlite"   // a file (or :memory:) through mattn/go-sqlite3: the zero-setup default
	Postgres Backend = "postgres" // a PostgreSQL server through gorm.io/driver/postgres (pgx)
)

// BackendOf tells which backend Open uses for dsn: Postgres for a postgres:// or
// postgresql:// URL, SQLite for anything else (a path, a file: URI, :memory:).
func BackendOf(dsn string) Backend {
	d := strings.ToLower(strings.TrimSpace(dsn))
	if strings.HasPrefix(d, "postgres://") || strings.HasPrefix(d, "postgresql://") {
		return Postgres
	}
	return SQLite
}

// BackendOfDB tells which backend db (opened with Open) runs on.
func BackendOfDB(db *gorm.DB) Backend {
	if db != nil && db.Dialector != nil && db.Dialector.Name() == "postgres" {
		return Postgres
	}
	return SQLite
}

// OneWriter reports whether the backend admits one writing transaction at a time for the whole
// database (SQLite): a process then does better queueing its own writers than letting them
// meet in the engine's busy handler. PostgreSQL locks rows, so writers of different items
// never wait for each other.
func (b Backend) OneWriter() bool { return b == SQLite }

// PostgreSQL SQLSTATE codes the storefront classifies.
const (
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
	pgLockNotAvailable     = "55P03"
	pgQueryCanceled        = "57014" // statement_timeout, or a cancel request
	pgAdminShutdown        = "57P01"
	pgCrashShutdown        = "57P02"
	pgCannotConnectNow     = "57P03"
	pgTooManyConnections   = "53300"
)

// IsBusy reports whether err means a transaction lost a race for a lock and was rolled back,
// so that running it again may succeed: SQLite's SQLITE_BUSY or SQLITE_LOCKED (another
// connection held the write lock past the busy timeout), or PostgreSQL's serialization
// failure (40001), deadlock (40P01) or lock not available (55P03).
func IsBusy(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgSerializationFailure, pgDeadlockDetected, pgLockNotAvailable:
			return true
		}
	}
	return false
}

// IsUnavailable reports whether err means the database cannot be used right now: busy past
// the busy timeout, the file cannot be opened or read, the pool is closed; for PostgreSQL, the
// server refused or dropped the connection, is shutting down or starting, has no connection
// slot left, or cancelled a statement past the statement timeout.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if IsBusy(err) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrCantOpen, sqlite3.ErrIoErr, sqlite3.ErrReadonly, sqlite3.ErrFull:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources
			pe.Code == pgQueryCanceled, pe.Code == pgAdminShutdown, pe.Code == pgCrashShutdown,
			pe.Code == pgCannotConnectNow, pe.Code == pgTooManyConnections:
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	msg := fmt.Sprint(err)
	return strings.Contains(msg, "sql: database is closed") || strings.Contains(msg, "conn closed")
}
