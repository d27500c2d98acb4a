package models_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/models"
)

// A database whose holds table predates hold keys (no idempotency_key, no fingerprint) gets
// both columns when it is opened again: its holds keep a NULL key, and a key then names one
// hold at most (INSERT ... ON CONFLICT (idempotency_key) DO NOTHING RETURNING leaves a second
// one out, as it does for orders), while NULL keys never collide.
func TestMigrationAddsHoldKeys(t *testing.T) { forEachBackend(t, testMigrationAddsHoldKeys) }

func testMigrationAddsHoldKeys(t *testing.T, b backend) {
	db, dsn := openBackend(t, b)
	for _, q := range []string{
		`DROP INDEX idx_holds_idempotency_key`,
		`ALTER TABLE holds DROP COLUMN idempotency_key`,
		`ALTER TABLE holds DROP COLUMN fingerprint`,
	} {
		require.NoError(t, db.Exec(q).Error, q)
	}
	require.False(t, db.Migrator().HasColumn(&models.Hold{}, "IdempotencyKey"), "the old schema")
	require.NoError(t, db.Exec(`INSERT INTO holds (status, expires_at_ms, strategy, created_at) VALUES ('active', 1, 'guard', ?)`,
		time.Now().UTC()).Error)

	again := dbtest.Open(t, dsn)
	assert.True(t, again.Migrator().HasColumn(&models.Hold{}, "IdempotencyKey"))
	assert.True(t, again.Migrator().HasColumn(&models.Hold{}, "Fingerprint"))
	assert.True(t, again.Migrator().HasIndex(&models.Hold{}, "idx_holds_idempotency_key"))
	var old models.Hold
	require.NoError(t, again.First(&old).Error)
	assert.Nil(t, old.IdempotencyKey, "a hold placed before keys has none")
	assert.Empty(t, old.Fingerprint)

	insert := func(key any) bool {
		t.Helper()
		rows, err := again.Raw(`INSERT INTO holds (status, expires_at_ms, strategy, idempotency_key, fingerprint, created_at)
			VALUES ('active', 1, 'guard', ?, 'hold:1x1;ttl=1s', ?) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`,
			key, time.Now().UTC()).Rows()
		require.NoError(t, err)
		defer rows.Close()
		inserted := rows.Next()
		require.NoError(t, rows.Err())
		return inserted
	}
	assert.True(t, insert("h-1"))
	assert.False(t, insert("h-1"), "one hold per key")
	assert.True(t, insert(nil))
	assert.True(t, insert(nil), "NULL keys never collide")
	var n int64
	require.NoError(t, again.Model(&models.Hold{}).Count(&n).Error)
	assert.EqualValues(t, 4, n)
}
