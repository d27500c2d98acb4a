package models_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/models"
)

// countingOpens counts the connections a driver registered under another name opens.
var countingOpens atomic.Int64

func init() {
	sql.Register("models-test-sqlite3", &countingDriver{})
}

type countingDriver struct{ sqlite3.SQLiteDriver }

func (d *countingDriver) Open(dsn string) (driver.Conn, error) {
	countingOpens.Add(1)
	return d.SQLiteDriver.Open(dsn)
}

// WithSQLiteDriver opens the file through the driver it names (the simulator's seam), with the
// pragmas and migration of every SQLite database; an unknown name fails Open.
func TestWithSQLiteDriver(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "driver.db")
	db, err := models.Open(ctx, path, models.WithSQLiteDriver("models-test-sqlite3"))
	require.NoError(t, err)
	defer func() { _ = models.Close(db) }()
	assert.Positive(t, countingOpens.Load(), "connections opened through the named driver")
	assert.True(t, db.Migrator().HasTable(&models.Item{}))
	var mode string
	require.NoError(t, db.Raw("PRAGMA journal_mode").Row().Scan(&mode))
	assert.Equal(t, "wal", mode)

	_, err = models.Open(ctx, filepath.Join(t.TempDir(), "x.db"), models.WithSQLiteDriver("no-such-driver"))
	assert.Error(t, err)
}
