// Package dbtest gives a test package the database backends its tests run against: a fresh
// SQLite file, and a fresh database on the package's private PostgreSQL server (internal/pgtest,
// started on first use), each opened through models.Open as the storefront opens it.
//
//	var dbs = dbtest.NewSet("inventory.db")
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		dbs.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		dbs.ForEach(t, func(t *testing.T, b dbtest.Backend) {
//			db, dsn := b.Open(t) // dsn opens the same database again, as another process would
//		})
//	}
package dbtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/pgtest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/models"
)

// Backend is one database engine.
type Backend struct {
	Name string
	dsn  func(tb testing.TB) string
}

// DSN returns a fresh, empty database: a file in a temporary directory, or a new database on
// the package's PostgreSQL server (dropped when the test ends). A server that cannot start
// fails the test.
func (b Backend) DSN(tb testing.TB) string { return b.dsn(tb) }

// Open opens a fresh database of the backend; the returned dsn opens it again.
func (b Backend) Open(tb testing.TB, opts ...models.Option) (*gorm.DB, string) {
	tb.Helper()
	dsn := b.dsn(tb)
	return Open(tb, dsn, opts...), dsn
}

// Open opens dsn (a file or a postgres:// URL) through models.Open, closed when the test ends.
func Open(tb testing.TB, dsn string, opts ...models.Option) *gorm.DB {
	tb.Helper()
	db, err := models.Open(context.Background(), dsn, opts...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = models.Close(db) })
	return db
}

// Set is one test package's backends. Its PostgreSQL server is shared by the package's tests;
// Close, from TestMain, stops it.
type Set struct {
	PG       pgtest.Shared
	SQLite   Backend
	Postgres Backend
}

// NewSet returns the backends of a test package; file names its SQLite files.
func NewSet(file string) *Set {
	s := &Set{}
	s.SQLite = Backend{"sqlite", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), file) }}
	s.Postgres = Backend{"postgres", func(tb testing.TB) string { return s.PG.Database(tb) }}
	return s
}

// All is every backend, SQLite first.
func (s *Set) All() []Backend { return []Backend{s.SQLite, s.Postgres} }

// ForEach runs test once per backend, as subtests named after the backend; under -short the
// PostgreSQL subtest skips (testutil.Postgres: the inner loop runs the table on SQLite).
//
// The rows run in parallel with each other (t.Parallel), not with other tests: each row has a
// database of its own and starts the servers it needs, and most of a row's time is waits
// (leases, deadlines, a PostgreSQL server's answers), so the two together take little longer
// than the slower one (docs/architecture.md#tests). A test whose rows cannot share the process
// (a process-wide setting) runs its rows with t.Run itself.
func (s *Set) ForEach(t *testing.T, test func(t *testing.T, b Backend)) {
	for _, b := range s.All() {
		t.Run(b.Name, func(t *testing.T) {
			if b.Name == s.Postgres.Name {
				testutil.SkipShort(t, testutil.Postgres)
			}
			t.Parallel()
			test(t, b)
		})
	}
}

// Close stops the package's PostgreSQL server if one was started.
func (s *Set) Close() { s.PG.Close() }
