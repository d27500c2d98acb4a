package models_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/models"
)

// dbs are the database backends of this package's tests (its PostgreSQL server starts on
// first use).
var dbs = dbtest.NewSet("store.db")

type backend = dbtest.Backend

var backends = dbs.All()

// forEachBackend runs test once per backend, as subtests named after the backend.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) { dbs.ForEach(t, test) }

// openBackend opens a fresh database of b.
func openBackend(t *testing.T, b backend, opts ...models.Option) (*gorm.DB, string) {
	t.Helper()
	return b.Open(t, opts...)
}

// Child mode of TestConcurrentOpenFromProcesses: the test binary re-executes itself with these
// variables set, opens the database and seeds it, and prints "seeded=<bool>".
const (
	envChildDB  = "STOCKGUARD_MODELS_CHILD_DB"
	envChildDir = "STOCKGUARD_MODELS_CHILD_SYNC"
	envChildID  = "STOCKGUARD_MODELS_CHILD_ID"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envChildDB); path != "" {
		os.Exit(child(path, os.Getenv(envChildDir), os.Getenv(envChildID)))
	}
	code := m.Run()
	dbs.Close()
	os.Exit(code)
}

func child(path, syncDir, id string) int {
	// Say we are ready, then wait for the go signal, so that every child opens at once.
	if err := os.WriteFile(filepath.Join(syncDir, "ready-"+id), nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(syncDir, "go")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "no go signal")
			return 2
		}
		time.Sleep(time.Millisecond)
	}
	ctx := context.Background()
	db, err := models.Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer models.Close(db)
	seeded, err := models.SeedDemo(ctx, db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seed:", err)
		return 1
	}
	fmt.Printf("seeded=%v\n", seeded)
	return 0
}

func openFile(t *testing.T, opts ...models.Option) (*gorm.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := models.Open(context.Background(), path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = models.Close(db) })
	return db, path
}

func TestOpenSetsPragmas(t *testing.T) {
	db, _ := openFile(t)
	pragma := func(name string) string {
		var v string
		require.NoError(t, db.Raw("PRAGMA "+name).Row().Scan(&v))
		return v
	}
	assert.Equal(t, "wal", pragma("journal_mode"))
	assert.Equal(t, "1", pragma("synchronous"), "NORMAL")
	assert.Equal(t, "1", pragma("foreign_keys"))
	assert.Equal(t, "5000", pragma("busy_timeout"))
	assert.True(t, db.Migrator().HasTable(&models.Item{}))
	assert.True(t, db.Migrator().HasTable(&models.Order{}))
}

// A transaction must hold the write lock from BEGIN (_txlock=immediate): a second connection
// cannot write while it is open, even though the transaction has not written yet.
func TestTransactionsAreImmediate(t *testing.T) {
	ctx := context.Background()
	db, path := openFile(t)
	other, err := models.Open(ctx, path, models.WithBusyTimeout(50*time.Millisecond))
	require.NoError(t, err)
	defer models.Close(other)

	tx := db.Begin()
	require.NoError(t, tx.Error)
	var n int64
	require.NoError(t, tx.Model(&models.Item{}).Count(&n).Error) // a read only

	err = other.Exec("INSERT INTO items (sku, name, price_cents, stock, initial_stock) VALUES ('a','a',1,1,1)").Error
	require.Error(t, err, "the open transaction holds the write lock")
	assert.True(t, models.IsBusy(err), "got %v", err)
	require.NoError(t, tx.Rollback().Error)

	require.NoError(t, other.Exec("INSERT INTO items (sku, name, price_cents, stock, initial_stock) VALUES ('a','a',1,1,1)").Error)
}

func TestOpenIsIdempotentAndSeedsOnce(t *testing.T) {
	forEachBackend(t, testOpenIsIdempotentAndSeedsOnce)
}

func testOpenIsIdempotentAndSeedsOnce(t *testing.T, b backend) {
	ctx := context.Background()
	db, path := openBackend(t, b)
	assert.Equal(t, models.Backend(b.Name), models.BackendOfDB(db))
	seeded, err := models.SeedDemo(ctx, db)
	require.NoError(t, err)
	assert.True(t, seeded)

	again, err := models.Open(ctx, path)
	require.NoError(t, err, "migrating a migrated database changes nothing")
	defer models.Close(again)
	seeded, err = models.SeedDemo(ctx, again)
	require.NoError(t, err)
	assert.False(t, seeded, "a catalogue is never seeded twice")

	var items []models.Item
	require.NoError(t, again.Order("id").Find(&items).Error)
	require.Len(t, items, len(models.DemoItems()))
	for _, it := range items {
		assert.Equal(t, it.Stock, it.InitialStock)
		assert.Zero(t, it.FenceToken)
	}
}

func TestUniqueIndexes(t *testing.T) { forEachBackend(t, testUniqueIndexes) }

func testUniqueIndexes(t *testing.T, b backend) {
	db, _ := openBackend(t, b)
	require.NoError(t, db.Create(&models.Item{SKU: "x", Name: "x", Stock: 1, InitialStock: 1}).Error)
	err := db.Create(&models.Item{SKU: "x", Name: "y", Stock: 1, InitialStock: 1}).Error
	assert.ErrorIs(t, err, gorm.ErrDuplicatedKey)

	key := "k1"
	require.NoError(t, db.Create(&models.Order{ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: &key}).Error)
	err = db.Create(&models.Order{ItemID: 1, Quantity: 1, Strategy: "guard", IdempotencyKey: &key}).Error
	assert.ErrorIs(t, err, gorm.ErrDuplicatedKey)
	// NULL keys do not collide.
	require.NoError(t, db.Create(&models.Order{ItemID: 1, Quantity: 1, Strategy: "guard"}).Error)
	require.NoError(t, db.Create(&models.Order{ItemID: 1, Quantity: 1, Strategy: "guard"}).Error)
}

func TestMemoryDatabasesArePrivate(t *testing.T) {
	ctx := context.Background()
	a, err := models.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer models.Close(a)
	b, err := models.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer models.Close(b)

	seeded, err := models.SeedDemo(ctx, a)
	require.NoError(t, err)
	require.True(t, seeded)
	seeded, err = models.SeedDemo(ctx, b)
	require.NoError(t, err)
	assert.True(t, seeded, "b is another database")

	// The data survives across statements and goroutines (one connection, never recycled).
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			assert.NoError(t, a.Model(&models.Item{}).Count(&n).Error)
			assert.EqualValues(t, len(models.DemoItems()), n)
		}()
	}
	wg.Wait()
}

func TestOpenRejectsBadDSN(t *testing.T) {
	_, err := models.Open(context.Background(), "")
	assert.Error(t, err)
	_, err = models.Open(context.Background(), filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
	assert.Error(t, err)

	_, err = models.Open(context.Background(), "postgres://%zz@127.0.0.1/x")
	assert.ErrorContains(t, err, "bad PostgreSQL URL")
	// Nothing listens there: refused at once, an outage.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = models.Open(context.Background(), "postgresql://postgres@"+addr+"/x?sslmode=disable")
	require.Error(t, err)
	assert.True(t, models.IsUnavailable(err), "refused: %v", err)
	// A database that does not exist is not an outage.
	url := dbs.PG.Database(t)
	_, err = models.Open(context.Background(), strings.Replace(url, "/t", "/nosuch", 1))
	require.Error(t, err)
	assert.False(t, models.IsUnavailable(err), "no such database: %v", err)
}

func TestBackendOf(t *testing.T) {
	for dsn, want := range map[string]models.Backend{
		"stockguard.db":                     models.SQLite,
		"file:x.db?mode=rwc":                models.SQLite,
		":memory:":                          models.SQLite,
		"postgres://u@h/db":                 models.Postgres,
		"postgresql://u:p@h:5432/db":        models.Postgres,
		" POSTGRES://u@h/db":                models.Postgres,
		"postgres.db":                       models.SQLite,
		"/var/lib/postgresql/stockguard.db": models.SQLite,
	} {
		assert.Equal(t, want, models.BackendOf(dsn), dsn)
	}
	assert.True(t, models.SQLite.OneWriter())
	assert.False(t, models.Postgres.OneWriter())
}

// Three processes open one fresh database at the same moment: all come up (migration
// included), and the catalogue is seeded exactly once.
func TestConcurrentOpenFromProcesses(t *testing.T) {
	forEachBackend(t, testConcurrentOpenFromProcesses)
}

func testConcurrentOpenFromProcesses(t *testing.T, b backend) {
	dir := t.TempDir()
	path := b.DSN(t)
	const n = 4
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for i := range cmds {
		outs[i] = &bytes.Buffer{}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChildDB+"="+path, envChildDir+"="+dir, fmt.Sprintf("%s=%d", envChildID, i))
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
		return len(m) == n
	}, 20*time.Second, 5*time.Millisecond, "children did not start")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o600))

	seededCount := 0
	for i, cmd := range cmds {
		err := cmd.Wait()
		out := outs[i].String()
		require.NoError(t, err, "child %d: %s", i, out)
		if strings.Contains(out, "seeded=true") {
			seededCount++
		} else {
			assert.Contains(t, out, "seeded=false")
		}
	}
	assert.Equal(t, 1, seededCount, "exactly one process seeds")

	db, err := models.Open(context.Background(), path)
	require.NoError(t, err)
	defer models.Close(db)
	var count int64
	require.NoError(t, db.Model(&models.Item{}).Count(&count).Error)
	assert.EqualValues(t, len(models.DemoItems()), count)
}

func TestDSNParametersWin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	db, err := models.Open(context.Background(), "file:"+path+"?_busy_timeout=1234", models.WithMaxOpenConns(2))
	require.NoError(t, err)
	defer models.Close(db)
	var v string
	require.NoError(t, db.Raw("PRAGMA busy_timeout").Row().Scan(&v))
	assert.Equal(t, "1234", v)
	require.NoError(t, db.Raw("PRAGMA journal_mode").Row().Scan(&v))
	assert.Equal(t, "wal", v, "the other defaults still apply")
	sqlDB, err := db.DB()
	require.NoError(t, err)
	assert.Equal(t, 2, sqlDB.Stats().MaxOpenConnections)
}

func TestLoggerAndErrorHelpers(t *testing.T) { forEachBackend(t, testLoggerAndErrorHelpers) }

func testLoggerAndErrorHelpers(t *testing.T, b backend) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, _ := openBackend(t, b, models.WithLogger(log))

	err := db.Exec("INSERT INTO no_such_table VALUES (1)").Error
	require.Error(t, err)
	assert.False(t, models.IsBusy(err))
	assert.False(t, models.IsUnavailable(err), "a bad statement is not an outage")
	assert.Contains(t, buf.String(), "no_such_table", "failed statements are logged at debug")

	require.NoError(t, models.Close(db))
	err = db.Exec("SELECT 1").Error
	assert.True(t, models.IsUnavailable(err), "closed: %v", err)
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
