// Package models holds the GORM models of the storefront and the code that opens its database
// (SQLite by default, PostgreSQL for a postgres:// URL): connection settings, migrations,
// seeding, and the classification of database errors (busy, unavailable). It has no business
// rules.
package models

import "time"

// Item is one product and its stock. Stock never goes below zero: the inventory service's
// conditional update is the guard (only the demo strategies redis-stock and watch write without
// it, to show what Redis alone lets through); FenceToken is the highest lock fencing token that has
// written this row, so a stale lock holder's write can be refused.
type Item struct {
	ID           int64  `gorm:"primaryKey"`
	SKU          string `gorm:"column:sku;uniqueIndex;not null"`
	Name         string `gorm:"not null"`
	PriceCents   int64  `gorm:"not null"`
	Stock        int    `gorm:"not null"`
	InitialStock int    `gorm:"not null"`
	FenceToken   int64  `gorm:"not null;default:0"`
	// Version is bumped by every write of the demo strategy optimistic, whose
	// compare-and-set (UPDATE ... WHERE version = ?) it is.
	Version   int64 `gorm:"not null;default:0"`
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Order is one successful purchase. It is written in the same transaction as the stock update
// it records. IdempotencyKey is NULL when the client sent none; Fingerprint identifies the
// request (item and quantity) that used the key, and Remaining is the stock left right after
// this purchase, kept so that a replay can rebuild the original response. Degraded is true for
// an order sold through the database guard alone while Redis was unavailable
// (--on-redis-down=guard): its FenceToken is 0. BatchID names the
// write transaction that stored the order: the orders of one coalesced lock hold share it (and
// their fence token), so "one write transaction per fence token" can be checked.
type Order struct {
	ID             int64   `gorm:"primaryKey"`
	ItemID         int64   `gorm:"index;not null"`
	Quantity       int     `gorm:"not null"`
	Strategy       string  `gorm:"not null"`
	FenceToken     int64   `gorm:"not null;default:0"`
	IdempotencyKey *string `gorm:"uniqueIndex"`
	Fingerprint    string  `gorm:"not null;default:''"`
	Remaining      int     `gorm:"not null"`
	Degraded       bool    `gorm:"not null;default:false"`
	BatchID        int64   `gorm:"not null;default:0"`
	CreatedAt      time.Time
}

// OrderLine is one item of an order: an order has one line per item it sold (a single
// purchase one, a cart one per distinct item), written in the same transaction as the order
// and the stock updates. FenceToken is the lock token that wrote the line's item (0 without a
// lock); Remaining is that item's stock right after the order, kept so that an idempotent
// replay can rebuild the original answer. Orders stored before lines existed get one line
// each at migration (migrate).
type OrderLine struct {
	ID         int64 `gorm:"primaryKey"`
	OrderID    int64 `gorm:"not null;uniqueIndex:idx_order_lines_order_item,priority:1"`
	ItemID     int64 `gorm:"not null;index;uniqueIndex:idx_order_lines_order_item,priority:2"`
	Quantity   int   `gorm:"not null"`
	FenceToken int64 `gorm:"not null;default:0"`
	Remaining  int   `gorm:"not null;default:0"`
}

// Hold statuses. A hold is placed active; it ends confirmed (turned into an order), cancelled
// or expired, once, by a conditional update (WHERE status = 'active').
const (
	HoldActive    = "active"
	HoldConfirmed = "confirmed"
	HoldCancelled = "cancelled"
	HoldExpired   = "expired"
)

// Hold is a reservation of stock: its lines' units were taken off the items' stock when it was
// placed, and go back when it is cancelled or expires. ExpiresAtMS is the expiry in Unix
// milliseconds of the database's clock (never a process's). OrderID is the order a
// confirmation made. IdempotencyKey is the key the hold was placed under (NULL when none;
// unique, as orders' keys are, and checked against them: one key names one order or one
// hold); Fingerprint identifies the placement (its merged lines and its ttl) so that a replay
// of the key can tell the same request from another.
type Hold struct {
	ID             int64  `gorm:"primaryKey"`
	Status         string `gorm:"not null;index"`
	ExpiresAtMS    int64  `gorm:"column:expires_at_ms;not null"`
	OrderID        *int64
	Strategy       string  `gorm:"not null;default:''"`
	IdempotencyKey *string `gorm:"uniqueIndex"`
	Fingerprint    string  `gorm:"not null;default:''"`
	CreatedAt      time.Time
}

// HoldLine is one item of a hold. FenceToken is the lock token that took its units.
type HoldLine struct {
	ID         int64 `gorm:"primaryKey"`
	HoldID     int64 `gorm:"not null;uniqueIndex:idx_hold_lines_hold_item,priority:1"`
	ItemID     int64 `gorm:"not null;index;uniqueIndex:idx_hold_lines_hold_item,priority:2"`
	Quantity   int   `gorm:"not null"`
	FenceToken int64 `gorm:"not null;default:0"`
}
