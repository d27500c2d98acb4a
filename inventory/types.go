package inventory

import (
	"errors"
	"time"
)

// Limits of a purchase request.
const (
	MaxQuantity = 1000        // largest quantity one purchase may ask for
	MaxWork     = time.Second // longest simulated work a request may ask for

	MaxIdempotencyKey = 128 // longest idempotency key, in printable ASCII characters
)

// Errors returned by Service methods; test them with errors.Is. Each one names one failure
// kind, and the HTTP layer maps each to one status code. Returned errors wrap them with
// details (item id, quantities) fit to show a client.
var (
	ErrInvalid             = errors.New("invalid request")
	ErrNotFound            = errors.New("not found")
	ErrSoldOut             = errors.New("sold out")
	ErrInsufficientStock   = errors.New("insufficient stock")
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	ErrOverloaded          = errors.New("too many purchases in flight for this item")
	ErrLockTimeout         = errors.New("timed out waiting for the item's lock")
	ErrLockLost            = errors.New("lock lost during the purchase; nothing was written")
	// ErrLockNotReplicated: the lock was taken on the Redis master but fewer replicas than
	// --lock-replicas acknowledged it before the wait ended (locking.ErrNotReplicated); it was
	// given back each time, nothing was written. Not ErrUnavailable: Redis answers, so
	// --on-redis-down guard does not sell without the lock then.
	ErrLockNotReplicated = errors.New("the item's lock was not acknowledged by enough Redis replicas; nothing was written")
	ErrUnavailable       = errors.New("a backing service is unavailable")
)

// PurchaseRequest asks to buy Quantity units of item ItemID.
type PurchaseRequest struct {
	ItemID         int64
	Quantity       int           // 1..MaxQuantity
	Strategy       string        // "" means the service's default strategy
	IdempotencyKey string        // "" means none
	Work           time.Duration // simulated slow work (a payment call), 0..MaxWork
}

// Receipt is the result of a successful purchase, or of an idempotent replay of one.
type Receipt struct {
	OrderID    int64  `json:"order_id"`
	ItemID     int64  `json:"item_id"`
	Quantity   int    `json:"quantity"`
	Remaining  int    `json:"remaining"`
	FenceToken int64  `json:"fence_token"`
	Strategy   string `json:"strategy"`
	Degraded   bool   `json:"degraded,omitempty"` // sold by the guard alone, Redis being down (fence_token 0)
	// Retries counts the version conflicts (optimistic) or aborted transactions (watch) the
	// purchase went through before it succeeded.
	Retries  int   `json:"retries,omitempty"`
	Replayed bool  `json:"-"` // true when an earlier order with the same key was returned
	Spent    Spent `json:"-"` // what this request cost: work spent, lock wait
}

// OrderQuery selects orders for verification, ascending by id.
type OrderQuery struct {
	ItemID  int64 // the orders with a line of this item; 0 means every order
	AfterID int64 // only orders with a greater id
	Limit   int   // 1..1000; 0 means 100
}

// ItemStats is one item's sales summary.
type ItemStats struct {
	ItemID        int64  `json:"item_id"`
	SKU           string `json:"sku"`
	InitialStock  int    `json:"initial_stock"`
	Stock         int    `json:"stock"`
	SoldUnits     int    `json:"sold_units"`  // the units of its order lines
	OrderCount    int    `json:"order_count"` // the orders with a line of it
	HeldUnits     int    `json:"held_units"`  // the units of its active holds (off the stock, not sold)
	OversoldUnits int    `json:"oversold_units"`
}

// Item is one product as the service shows it. FenceToken is the highest lock fencing token
// that has written its stock.
type Item struct {
	ID           int64
	SKU          string
	Name         string
	Stock        int
	InitialStock int
	PriceCents   int64
	FenceToken   int64
}

// Order is one stored purchase as the service shows it. IdempotencyKey is nil when the
// purchase carried none.
type Order struct {
	ID             int64
	ItemID         int64
	Quantity       int
	Strategy       string
	FenceToken     int64
	IdempotencyKey *string
	Degraded       bool  // sold by the guard alone while Redis was unavailable
	BatchID        int64 // the write transaction that stored it (one per lock hold for lock+guard)
	CreatedAt      time.Time
}

// NewItem describes one item of a catalogue reset.
type NewItem struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Stock      int    `json:"stock"`
	PriceCents int64  `json:"price_cents"`
}
