package models

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// DemoItems returns the demo catalogue that SeedDemo writes: a few items with InitialStock
// equal to Stock. The caller owns the returned slice.
func DemoItems() []Item {
	items := []Item{
		{SKU: "SG-TEE-001", Name: "Stockguard T-shirt", PriceCents: 1999, Stock: 100},
		{SKU: "SG-MUG-001", Name: "Fenced coffee mug", PriceCents: 1299, Stock: 100},
		{SKU: "SG-CAP-001", Name: "Redis red cap", PriceCents: 1499, Stock: 50},
		{SKU: "SG-STK-001", Name: "Sticker pack", PriceCents: 399, Stock: 500},
		{SKU: "SG-HOD-001", Name: "Limited hoodie", PriceCents: 4999, Stock: 10},
	}
	for i := range items {
		items[i].InitialStock = items[i].Stock
	}
	return items
}

// SeedDemo writes DemoItems when the items table is empty and reports whether it did. The
// check and the insert run in one transaction that runs alone (SQLite: immediate; PostgreSQL:
// the migration's advisory lock), so processes that seed one database at the same moment seed
// it once. It fails only on a database error.
func SeedDemo(ctx context.Context, db *gorm.DB) (seeded bool, err error) {
	err = retryBusy(ctx, func() error {
		seeded = false
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := serialize(tx); err != nil {
				return err
			}
			var n int64
			if err := tx.Model(&Item{}).Count(&n).Error; err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			items := DemoItems()
			if err := tx.Create(&items).Error; err != nil {
				return err
			}
			seeded = true
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("models: seed demo catalogue: %w", err)
	}
	return seeded, nil
}
