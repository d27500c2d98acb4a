package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/models"
)

// ListItems returns every item, ascending by id.
func (s *Service) ListItems(ctx context.Context) ([]Item, error) {
	var rows []models.Item
	if err := s.db.WithContext(ctx).Order("id").Find(&rows).Error; err != nil {
		return nil, s.dbErr(err)
	}
	items := make([]Item, 0, len(rows))
	for _, r := range rows {
		items = append(items, itemOf(r))
	}
	return items, nil
}

// GetItem returns item id, or an error wrapping ErrNotFound.
func (s *Service) GetItem(ctx context.Context, id int64) (Item, error) {
	var row models.Item
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Item{}, fmt.Errorf("%w: item %d", ErrNotFound, id)
	}
	if err != nil {
		return Item{}, s.dbErr(err)
	}
	return itemOf(row), nil
}

func itemOf(r models.Item) Item {
	return Item{ID: r.ID, SKU: r.SKU, Name: r.Name, Stock: r.Stock, InitialStock: r.InitialStock,
		PriceCents: r.PriceCents, FenceToken: r.FenceToken}
}

// ListOrders returns the orders q selects, ascending by id (with an item, every order with a
// line of it: its purchases and the carts that hold it). It fails with ErrInvalid when
// q.Limit is outside 0..1000 or an id is negative.
func (s *Service) ListOrders(ctx context.Context, q OrderQuery) ([]Order, error) {
	switch {
	case q.Limit < 0 || q.Limit > 1000:
		return nil, fmt.Errorf("%w: limit must be 1..1000, got %d", ErrInvalid, q.Limit)
	case q.ItemID < 0 || q.AfterID < 0:
		return nil, fmt.Errorf("%w: ids must not be negative", ErrInvalid)
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	db := s.db.WithContext(ctx).Where("id > ?", q.AfterID)
	if q.ItemID != 0 { // the orders with a line of the item: its purchases and the carts that hold it
		db = db.Where("id IN (SELECT order_id FROM order_lines WHERE item_id = ?)", q.ItemID)
	}
	var rows []models.Order
	if err := db.Order("id").Limit(q.Limit).Find(&rows).Error; err != nil {
		return nil, s.dbErr(err)
	}
	orders := make([]Order, 0, len(rows))
	for _, o := range rows {
		orders = append(orders, Order{ID: o.ID, ItemID: o.ItemID, Quantity: o.Quantity, Strategy: o.Strategy,
			FenceToken: o.FenceToken, IdempotencyKey: o.IdempotencyKey, Degraded: o.Degraded, BatchID: o.BatchID, CreatedAt: o.CreatedAt.UTC()})
	}
	return orders, nil
}

// Stats returns every item's sales summary, ascending by item id, read in one statement (one
// consistent snapshot): sold units count order lines (a cart's order sells several items),
// held units the lines of holds still active (off the stock, until confirmed, cancelled or
// expired and given back), so that initial stock = stock + sold + held when nothing oversold.
func (s *Service) Stats(ctx context.Context) ([]ItemStats, error) {
	stats := []ItemStats{}
	err := s.db.WithContext(ctx).Raw(`
		SELECT i.id AS item_id, i.sku AS sku, i.initial_stock AS initial_stock, i.stock AS stock,
		       CAST(COALESCE((SELECT SUM(l.quantity) FROM order_lines l WHERE l.item_id = i.id), 0) AS BIGINT) AS sold_units,
		       (SELECT COUNT(*) FROM order_lines l WHERE l.item_id = i.id) AS order_count,
		       CAST(COALESCE((SELECT SUM(hl.quantity) FROM hold_lines hl JOIN holds h ON h.id = hl.hold_id
		                      WHERE hl.item_id = i.id AND h.status = 'active'), 0) AS BIGINT) AS held_units
		FROM items i ORDER BY i.id`).Scan(&stats).Error
	if err != nil {
		return nil, s.dbErr(err)
	}
	for i := range stats {
		stats[i].OversoldUnits = max(0, stats[i].SoldUnits+stats[i].HeldUnits-stats[i].InitialStock)
	}
	return stats, nil
}

// Reset replaces the catalogue and deletes every order and hold, in one transaction; each item's
// initial stock is its stock. It fails with ErrInvalid when an item has an empty sku or name,
// a negative stock or price, or when two items share a sku; nothing is changed then. Once the
// new catalogue is committed, Reset calls the Resetter of every offered strategy that keeps
// state outside the database (Strategy rows of Config.Extra); when one fails, the error wraps
// ErrUnavailable and the catalogue stays reset.
func (s *Service) Reset(ctx context.Context, items []NewItem) error {
	rows := make([]models.Item, 0, len(items))
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		sku, name := strings.TrimSpace(it.SKU), strings.TrimSpace(it.Name)
		switch {
		case sku == "" || name == "":
			return fmt.Errorf("%w: item %d: sku and name must not be empty", ErrInvalid, i)
		case it.Stock < 0 || it.PriceCents < 0:
			return fmt.Errorf("%w: item %d (%s): stock and price must not be negative", ErrInvalid, i, sku)
		case seen[sku]:
			return fmt.Errorf("%w: sku %q appears twice", ErrInvalid, sku)
		}
		seen[sku] = true
		rows = append(rows, models.Item{SKU: sku, Name: name, PriceCents: it.PriceCents,
			Stock: it.Stock, InitialStock: it.Stock})
	}
	err := s.store.tx(ctx, func(tx *gorm.DB) error {
		for _, table := range []string{"order_lines", "orders", "hold_lines", "holds"} {
			if err := tx.Exec("DELETE FROM " + table).Error; err != nil {
				return err
			}
		}
		if err := tx.Exec("DELETE FROM items").Error; err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		return tx.CreateInBatches(&rows, 200).Error
	})
	if err != nil {
		return s.dbErr(err)
	}
	if len(s.resets) > 0 {
		stocks := make(map[int64]int, len(rows))
		for _, r := range rows {
			stocks[r.ID] = r.Stock
		}
		var errs []error
		for _, r := range s.resets {
			errs = append(errs, r.Reset(ctx, stocks))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%w: the catalogue is reset but not what its strategies keep outside the database: %w", ErrUnavailable, err)
		}
	}
	s.log.InfoContext(ctx, "catalogue reset", "items", len(rows))
	return nil
}

// Check is one readiness check of a backing service (main gives one per configured Redis
// node: a server, a Sentinel, a cluster node).
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// CheckResult is the outcome of one readiness check, as /readyz shows it.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	State string `json:"state,omitempty"` // a failed check's CheckError.State ("open": its breaker is open)
	err   error
}

// CheckError is a failure of a readiness check that has more to tell: a State to show (e.g.
// "open": the Redis node's circuit breaker is open), and whether the service sells without
// that backing service (Optional: the lock service under OnRedisDownGuard), in which case the
// check shows as failed but readiness holds.
type CheckError struct {
	State    string
	Optional bool
	Err      error
}

func (e *CheckError) Error() string { return e.State + ": " + e.Err.Error() }

func (e *CheckError) Unwrap() error { return e.Err }

// Readiness runs every check at once, the database first in the list: each result says
// whether it answered. err wraps ErrUnavailable and names every failed check, with its cause,
// when one failed (but for an Optional CheckError, which is only shown).
func (s *Service) Readiness(ctx context.Context) ([]CheckResult, error) {
	all := append([]Check{{Name: "database", Ping: s.pingDB}}, s.checks...)
	res := make([]CheckResult, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() { // owner: Readiness, which waits; each Ping is bounded by ctx
			defer wg.Done()
			err := c.Ping(ctx)
			res[i] = CheckResult{Name: c.Name, OK: err == nil, err: err}
			var ce *CheckError
			if errors.As(err, &ce) {
				res[i].State = ce.State
				if ce.Optional {
					res[i].err = nil // shown, not failing
				}
			}
		}()
	}
	wg.Wait()
	var errs []error
	for _, r := range res {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Name, r.err))
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
	}
	return res, nil
}

// Ready is Readiness without the list: nil when every check answered.
func (s *Service) Ready(ctx context.Context) error {
	_, err := s.Readiness(ctx)
	return err
}

func (s *Service) pingDB(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err == nil {
		err = sqlDB.PingContext(ctx)
	}
	if err == nil {
		err = s.db.WithContext(ctx).Exec("SELECT 1").Error
	}
	return err
}
