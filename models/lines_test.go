package models_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/models"
)

// Orders stored before order lines existed (or by an older process since) get one line each
// when the database is opened; opening it again, by several pools at once, adds none.
func TestMigrationBackfillsOrderLines(t *testing.T) {
	forEachBackend(t, testMigrationBackfillsOrderLines)
}

func testMigrationBackfillsOrderLines(t *testing.T, b backend) {
	ctx := context.Background()
	db, dsn := openBackend(t, b)
	// Orders without lines, as an older version wrote them.
	for i, q := range []int{3, 1, 2} {
		require.NoError(t, db.Exec(`INSERT INTO orders (item_id, quantity, strategy, fence_token, fingerprint, remaining, degraded, batch_id, created_at)
			VALUES (?, ?, 'guard', ?, '', ?, false, 0, CURRENT_TIMESTAMP)`, i+1, q, 10+i, 7).Error)
	}
	var n int64
	require.NoError(t, db.Model(&models.OrderLine{}).Count(&n).Error)
	require.Zero(t, n)

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again, err := models.Open(ctx, dsn)
			if assert.NoError(t, err) {
				_ = models.Close(again)
			}
		}()
	}
	wg.Wait()
	var lines []models.OrderLine
	require.NoError(t, db.Order("order_id").Find(&lines).Error)
	var orders []models.Order
	require.NoError(t, db.Order("id").Find(&orders).Error)
	require.Len(t, lines, len(orders), "one line per order, however many processes migrated")
	for i, o := range orders {
		assert.Equal(t, models.OrderLine{ID: lines[i].ID, OrderID: o.ID, ItemID: o.ItemID, Quantity: o.Quantity,
			FenceToken: o.FenceToken, Remaining: o.Remaining}, lines[i])
	}
	assert.True(t, db.Migrator().HasTable(&models.Hold{}))
	assert.True(t, db.Migrator().HasTable(&models.HoldLine{}))
}
