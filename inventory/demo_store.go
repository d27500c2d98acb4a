//go:build !nodemo

package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// versioned is what optimistic reads of an item.
type versioned struct {
	Stock   int
	Version int64
}

// readVersion returns the item's stock and version, in a statement of its own.
func (st store) readVersion(ctx context.Context, itemID int64) (versioned, error) {
	var v versioned
	err := st.db.WithContext(ctx).Raw("SELECT stock, version FROM items WHERE id = ?", itemID).Row().Scan(&v.Stock, &v.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return versioned{}, fmt.Errorf("%w: item %d", ErrNotFound, itemID)
	}
	return v, err
}

// writeVersioned is optimistic's compare-and-set: it writes the stock computed from read and
// bumps the version only if the row still has read's version, and inserts the order, in one
// short transaction. ok is false (nothing written) when another writer came first. The stock
// is compared too, so a writer that does not bump the version (the other strategies) is seen
// as well.
func (st store) writeVersioned(ctx context.Context, p purchase, strategy string, read versioned) (rec Receipt, ok bool, err error) {
	newStock := read.Stock - p.quantity
	err = st.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE items SET stock = ?, version = version + 1, updated_at = ?
			WHERE id = ? AND version = ? AND stock = ?`,
			newStock, time.Now().UTC(), p.itemID, read.Version, read.Stock)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		ok = true
		var err error
		rec, err = insertOrder(tx, p, strategy, 0, newStock)
		return err
	})
	return rec, ok && err == nil, err
}

// writeTaken is the write of redis-stock and watch: Redis has decided, the database records
// the order and takes the units off its stock unconditionally (which goes below zero when
// Redis sold units that were not there).
func (st store) writeTaken(ctx context.Context, p purchase, strategy string) (Receipt, error) {
	var rec Receipt
	err := st.tx(ctx, func(tx *gorm.DB) error {
		var remaining int
		err := tx.Raw("UPDATE items SET stock = stock - ?, updated_at = ? WHERE id = ? RETURNING stock",
			p.quantity, time.Now().UTC(), p.itemID).Row().Scan(&remaining)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: item %d", ErrNotFound, p.itemID)
		}
		if err != nil {
			return err
		}
		rec, err = insertOrder(tx, p, strategy, 0, remaining)
		return err
	})
	return rec, err
}
