package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// ItemView is an item as the API shows it.
type ItemView struct {
	ID         int64  `json:"id"`
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Stock      int    `json:"stock"`
	PriceCents int64  `json:"price_cents"`
}

func newItemView(it inventory.Item) ItemView {
	return ItemView{ID: it.ID, SKU: it.SKU, Name: it.Name, Stock: it.Stock, PriceCents: it.PriceCents}
}

// ItemViews returns the items as the API shows them (GET /api/items; the lab's reset answers
// them too).
func ItemViews(items []inventory.Item) []ItemView {
	views := make([]ItemView, 0, len(items))
	for _, it := range items {
		views = append(views, newItemView(it))
	}
	return views
}

// orderView is an order as the API shows it; idempotency_key is null when none was sent.
// Lines are its items, ascending by item id: one line for a purchase (the same item_id and
// quantity as the order's), one per item for a cart's order, whose item_id is 0 when it has
// several lines and whose quantity is the sum of its lines.
type orderView struct {
	OrderID        int64                   `json:"order_id"`
	ItemID         int64                   `json:"item_id"`
	Quantity       int                     `json:"quantity"`
	Lines          []inventory.LineReceipt `json:"lines"`
	Strategy       string                  `json:"strategy"`
	FenceToken     int64                   `json:"fence_token"`
	IdempotencyKey *string                 `json:"idempotency_key"`
	Degraded       bool                    `json:"degraded,omitempty"`
	BatchID        int64                   `json:"batch_id"`
	CreatedAt      time.Time               `json:"created_at"`
}

func newOrderViews(orders []inventory.Order, lines map[int64][]inventory.LineReceipt) []orderView {
	views := make([]orderView, 0, len(orders))
	for _, o := range orders {
		ls := lines[o.ID]
		if ls == nil {
			ls = []inventory.LineReceipt{} // an order deleted by a reset between the two reads
		}
		views = append(views, orderView{
			OrderID: o.ID, ItemID: o.ItemID, Quantity: o.Quantity, Lines: ls, Strategy: o.Strategy,
			FenceToken: o.FenceToken, IdempotencyKey: o.IdempotencyKey, Degraded: o.Degraded, BatchID: o.BatchID, CreatedAt: o.CreatedAt,
		})
	}
	return views
}

func (s *server) listItems(c *gin.Context) {
	items, err := s.svc.ListItems(c.Request.Context())
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, ItemViews(items))
}

func (s *server) getItem(c *gin.Context) {
	id, err := pathID(c)
	if err != nil {
		writeError(c, err)
		return
	}
	item, err := s.svc.GetItem(c.Request.Context(), id)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, newItemView(item))
}

// listOrders answers GET /api/orders?item_id=&after_id=&limit= (each optional).
func (s *server) listOrders(c *gin.Context) {
	q, err := parseOrderQuery(c)
	if err != nil {
		writeError(c, err)
		return
	}
	orders, err := s.svc.ListOrders(c.Request.Context(), q)
	if err != nil {
		writeError(c, err)
		return
	}
	ids := make([]int64, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	lines, err := s.svc.OrderLines(c.Request.Context(), ids)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, newOrderViews(orders, lines))
}

// parseOrderQuery reads item_id (> 0), after_id (>= 0) and limit (1..1000, default 100).
func parseOrderQuery(c *gin.Context) (inventory.OrderQuery, error) {
	var q inventory.OrderQuery
	var err error
	if q.ItemID, err = queryInt(c, "item_id", 1, 1<<62); err != nil {
		return q, err
	}
	if q.AfterID, err = queryInt(c, "after_id", 0, 1<<62); err != nil {
		return q, err
	}
	limit, err := queryInt(c, "limit", 1, 1000)
	q.Limit = int(limit)
	return q, err
}

// queryInt parses the optional query parameter name as an integer in [min, max]; absent is 0.
func queryInt(c *gin.Context, name string, min, max int64) (int64, error) {
	raw, ok := c.GetQuery(name)
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("%w: query parameter %s must be an integer from %d to %d", inventory.ErrInvalid, name, min, max)
	}
	return n, nil
}

func (s *server) stats(c *gin.Context) {
	stats, err := s.svc.Stats(c.Request.Context())
	if err != nil {
		writeError(c, err)
		return
	}
	if stats == nil {
		stats = []inventory.ItemStats{}
	}
	c.JSON(http.StatusOK, stats)
}

// resetRequest is the body of POST /api/admin/reset.
type resetRequest struct {
	Items []inventory.NewItem `json:"items"`
}

// reset replaces the catalogue and deletes every order; it answers the new catalogue.
func (s *server) reset(c *gin.Context) {
	var req resetRequest
	if err := decodeStrict(c.Request.Body, &req); err != nil {
		writeError(c, err)
		return
	}
	if req.Items == nil {
		writeError(c, fmt.Errorf("%w: body must be {\"items\":[...]}", inventory.ErrInvalid))
		return
	}
	if err := s.svc.Reset(c.Request.Context(), req.Items); err != nil {
		writeError(c, err)
		return
	}
	requestLogger(c).Info("catalogue reset", "items", len(req.Items))
	items, err := s.svc.ListItems(c.Request.Context())
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, ItemViews(items))
}

// requireAdmin lets the request through only with "Authorization: Bearer <admin token>".
// Both sides are hashed before a constant-time compare, so neither the token nor its length
// leaks through timing.
func (s *server) requireAdmin(c *gin.Context) {
	given, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || s.adminToken == "" {
		writeError(c, errUnauthorized)
		return
	}
	want := sha256.Sum256([]byte(s.adminToken))
	got := sha256.Sum256([]byte(strings.TrimSpace(given)))
	if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		writeError(c, errUnauthorized)
		return
	}
	c.Next()
}

// pathID parses the :id path parameter. It must be a positive decimal integer: anything else
// ("abc", "0", "-1", "1.5", out of int64 range) is 400 invalid_request, so 404 always means a
// well-formed id that names no item.
func pathID(c *gin.Context) (int64, error) {
	raw := c.Param("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 || strings.HasPrefix(raw, "+") {
		return 0, fmt.Errorf("%w: item id %q must be a positive integer", inventory.ErrInvalid, raw)
	}
	return id, nil
}

// unavailable marks err as inventory.ErrUnavailable unless it already is one of the sentinels.
func unavailable(err error) error {
	if classify(err).code != internalError.code {
		return err
	}
	return errors.Join(inventory.ErrUnavailable, err)
}
