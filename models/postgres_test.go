package models_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/models"
)

func TestPostgresSessionSettings(t *testing.T) {
	ctx := context.Background()
	url := dbs.PG.Database(t)
	db, err := models.Open(ctx, url, models.WithStatementTimeout(1500*time.Millisecond), models.WithMaxOpenConns(3))
	require.NoError(t, err)
	defer models.Close(db)
	assert.Equal(t, models.Postgres, models.BackendOfDB(db))
	show := func(db *gorm.DB, name string) string {
		var v string
		require.NoError(t, db.Raw("SHOW "+name).Row().Scan(&v))
		return v
	}
	assert.Equal(t, "1500ms", show(db, "statement_timeout"))
	assert.Equal(t, "3s", show(db, "idle_in_transaction_session_timeout"), "a session left inside a transaction ends")
	assert.Equal(t, "30", show(db, "tcp_keepalives_idle"), "seconds")
	assert.Equal(t, "read committed", show(db, "transaction_isolation"), "the guard is built for READ COMMITTED")
	assert.Equal(t, "stockguard", show(db, "application_name"))
	sqlDB, err := db.DB()
	require.NoError(t, err)
	assert.Equal(t, 3, sqlDB.Stats().MaxOpenConnections)

	def, err := models.Open(ctx, url+"&application_name=mine")
	require.NoError(t, err)
	defer models.Close(def)
	assert.Equal(t, "5s", show(def, "statement_timeout"))
	assert.Equal(t, "mine", show(def, "application_name"), "the URL's parameters win")
	sqlDB, err = def.DB()
	require.NoError(t, err)
	assert.Equal(t, models.DefaultPostgresPool, sqlDB.Stats().MaxOpenConnections)
}

// The errors the storefront must tell apart, each produced for real on the server.
func TestPostgresErrorClassification(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	ctx := context.Background()
	url := dbs.PG.Database(t)
	db, err := models.Open(ctx, url, models.WithStatementTimeout(200*time.Millisecond))
	require.NoError(t, err)
	defer models.Close(db)
	require.NoError(t, db.Create(&models.Item{SKU: "a", Name: "a", Stock: 5, InitialStock: 5}).Error)
	// The two-transaction cases run on a pool with the default timeouts: with db's 200 ms
	// statement timeout, a transaction left idle while the other connection's statement ran
	// was ended by its idle-in-transaction timeout under stress-ng (25P03, not 40001).
	roomy, err := models.Open(ctx, url)
	require.NoError(t, err)
	defer models.Close(roomy)

	t.Run("statement timeout is unavailable", func(t *testing.T) {
		err := db.Exec("SELECT pg_sleep(2)").Error
		require.Error(t, err)
		assert.True(t, models.IsUnavailable(err), "%v", err)
		assert.False(t, models.IsBusy(err), "%v", err)
	})

	t.Run("serialization failure is busy", func(t *testing.T) {
		tx := roomy.Begin(&sqlTxOptionsRepeatableRead)
		require.NoError(t, tx.Error)
		defer tx.Rollback()
		var stock int
		require.NoError(t, tx.Raw("SELECT stock FROM items WHERE sku = 'a'").Row().Scan(&stock)) // the snapshot
		require.NoError(t, roomy.Exec("UPDATE items SET stock = stock - 1 WHERE sku = 'a'").Error)
		err := tx.Exec("UPDATE items SET stock = stock - 1 WHERE sku = 'a'").Error
		require.Error(t, err)
		assert.True(t, models.IsBusy(err), "40001: %v", err)
		assert.True(t, models.IsUnavailable(err), "busy is a kind of unavailable: %v", err)
	})

	t.Run("terminated connection is unavailable", func(t *testing.T) {
		tx := roomy.Begin()
		require.NoError(t, tx.Error)
		defer tx.Rollback()
		var pid int
		require.NoError(t, tx.Raw("SELECT pg_backend_pid()").Row().Scan(&pid))
		require.NoError(t, tx.Exec("UPDATE items SET stock = 0 WHERE sku = 'a'").Error)
		require.NoError(t, roomy.Exec("SELECT pg_terminate_backend(?)", pid).Error)
		err := tx.Exec("UPDATE items SET name = 'b' WHERE sku = 'a'").Error
		require.Error(t, err)
		assert.True(t, models.IsUnavailable(err), "%v", err)
		var stock int
		require.NoError(t, db.Raw("SELECT stock FROM items WHERE sku = 'a'").Row().Scan(&stock))
		assert.Equal(t, 4, stock, "the lost transaction wrote nothing")
	})

	t.Run("a bad statement is not an outage", func(t *testing.T) {
		err := db.Exec("SELECT * FROM no_such_table").Error
		require.Error(t, err)
		assert.False(t, models.IsUnavailable(err), "%v", err)
		assert.False(t, models.IsBusy(err), "%v", err)
	})

	t.Run("server down is unavailable, and the pool recovers", func(t *testing.T) {
		srv := dbs.PG.Server(t)
		srv.Stop()
		err := db.Exec("SELECT 1").Error
		require.Error(t, err)
		assert.True(t, models.IsUnavailable(err), "%v", err)
		require.NoError(t, srv.Restart())
		// The pool drops the dead connections it meets (database/sql retries ErrBadConn).
		require.Eventually(t, func() bool { return db.Exec("SELECT 1").Error == nil }, 10*time.Second, 20*time.Millisecond)
	})
}

// The coalesced hold's batched write inserts orders with INSERT ... ON CONFLICT (idempotency_key) DO
// NOTHING RETURNING: the unique index supports it on both backends, and NULL keys never
// conflict.
func TestOnConflictDoNothingReturning(t *testing.T) {
	forEachBackend(t, testOnConflictDoNothingReturning)
}

func testOnConflictDoNothingReturning(t *testing.T, b backend) {
	db, _ := openBackend(t, b)
	insert := func(keys ...any) []string {
		t.Helper()
		var got []string
		err := db.Transaction(func(tx *gorm.DB) error {
			rows, err := tx.Raw(`INSERT INTO orders (item_id, quantity, strategy, fence_token, idempotency_key, fingerprint, remaining, created_at)
				VALUES (1, 1, 'guard', 0, ?, '', 0, ?), (1, 1, 'guard', 0, ?, '', 0, ?)
				ON CONFLICT (idempotency_key) DO NOTHING RETURNING COALESCE(idempotency_key, '-')`,
				keys[0], time.Now().UTC(), keys[1], time.Now().UTC()).Rows()
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				got = append(got, k)
			}
			return rows.Err()
		})
		require.NoError(t, err)
		return got
	}
	assert.ElementsMatch(t, []string{"k1", "k2"}, insert("k1", "k2"))
	assert.ElementsMatch(t, []string{"k3"}, insert("k2", "k3"), "the taken key is left out")
	assert.ElementsMatch(t, []string{"-", "-"}, insert(nil, nil), "NULL keys never conflict")
	var n int64
	require.NoError(t, db.Model(&models.Order{}).Count(&n).Error)
	assert.EqualValues(t, 5, n)
}

var sqlTxOptionsRepeatableRead = sql.TxOptions{Isolation: sql.LevelRepeatableRead}

// Instances that start at once on one database migrate one after the other (the advisory
// lock); the later ones wait for the whole migration of the first, which on a loaded machine
// can outlast the statement timeout meant for purchases. Here another session holds the lock
// for three statement timeouts: Open waits for it (its migration's statements are bounded by
// SerializeTimeout) and returns only after the holder let go.
func TestPostgresMigrationWaitsPastStatementTimeout(t *testing.T) {
	ctx := context.Background()
	url := dbs.PG.Database(t)
	const timeout = 200 * time.Millisecond
	// The holder sits idle inside its transaction for three timeouts: its own session's
	// idle_in_transaction_session_timeout (twice its statement timeout) must outlast that.
	holder, err := models.Open(ctx, url, models.WithStatementTimeout(5*timeout))
	require.NoError(t, err)
	defer models.Close(holder)
	tx := holder.Begin()
	require.NoError(t, tx.Error)
	require.NoError(t, tx.Exec("SELECT pg_advisory_xact_lock(?)", models.AdvisoryLockKey).Error)

	type opened struct {
		db  *gorm.DB
		err error
		at  time.Time
	}
	done := make(chan opened, 1)
	go func() {
		db, err := models.Open(ctx, url, models.WithStatementTimeout(timeout))
		done <- opened{db, err, time.Now()}
	}()
	time.Sleep(3 * timeout) // the other Open waits on the lock meanwhile
	released := time.Now()
	require.NoError(t, tx.Commit().Error)
	o := <-done
	require.NoError(t, o.err, "the migration waited past the statement timeout")
	defer models.Close(o.db)
	assert.True(t, o.at.After(released), "Open returned after the holder let go of the lock")
	var v string
	require.NoError(t, o.db.Raw("SHOW statement_timeout").Row().Scan(&v))
	assert.Equal(t, "200ms", v, "the session keeps its statement timeout: SET LOCAL ended with the migration")
}
