package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// Carts is what the cart and hold routes need of the inventory service (part of Service;
// *inventory.Service has these methods).
type Carts interface {
	Checkout(ctx context.Context, req inventory.CheckoutRequest) (inventory.CartReceipt, error)
	PlaceHold(ctx context.Context, req inventory.HoldRequest) (inventory.StockHold, error)
	GetHold(ctx context.Context, id int64) (inventory.StockHold, error)
	ConfirmHold(ctx context.Context, id int64) (inventory.CartReceipt, error)
	CancelHold(ctx context.Context, id int64) error
	// OrderLines gives GET /api/orders the lines of the orders it lists.
	OrderLines(ctx context.Context, ids []int64) (map[int64][]inventory.LineReceipt, error)
}

// cartRoutes registers the cart and hold routes:
//
//	POST   /api/checkout             {"lines":[{"item_id":1,"quantity":2},...]}, Idempotency-Key:
//	                                 201 the order (all lines or none), 200 idempotent replay
//	POST   /api/holds                {"lines":[...],"ttl":"10m"}, Idempotency-Key: 201 the hold
//	                                 (units set aside), 200 the same hold as it stands now
//	GET    /api/holds/:id            200 the hold, its status as of the database's clock
//	POST   /api/holds/:id/confirm    201 the order, 200 the same order again
//	DELETE /api/holds/:id            204 (idempotent); the units go back
//
// A cart or hold refused for want of stock is 409 insufficient_stock, and the error object
// carries one more field, "lines", naming every short line:
//
//	{"error":{"code":"insufficient_stock","message":"...",
//	          "lines":[{"item_id":2,"requested":3,"available":1}]}}
//
// Every other error is the one error shape of every route. Confirming an expired hold is 410
// hold_expired; confirming a cancelled hold or cancelling a confirmed one is 409
// hold_not_active.
//
// Carts are wired as purchases are: a checkout, a hold's placement and its confirmation each
// take one of the purchases in flight of Config.MaxPurchases (bound: 503 at_capacity past
// it); a cancel takes none (it only gives units back). The service admits a checkout and a
// placement through the per-item admission limit of every item of the cart. /metrics counts
// every answer of these routes by result (counted). Config.Intercept acts on single purchases
// only: a cart or hold request it would give an interceptor is refused (singlePurchaseFaults).
func (s *server) cartRoutes(api *gin.RouterGroup, limit gin.HandlerFunc) {
	api.POST("/checkout", s.counted(cartCheckout), s.bound, limit, s.checkout)
	api.POST("/holds", s.counted(cartPlace), s.bound, limit, s.placeHold)
	api.GET("/holds/:id", limit, s.getHold)
	api.POST("/holds/:id/confirm", s.counted(cartConfirm), s.bound, limit, s.confirmHold)
	api.DELETE("/holds/:id", s.counted(cartCancel), limit, s.cancelHold)
}

// errFaultsSinglePurchase refuses a cart or hold request that Config.Intercept would act on.
var errFaultsSinglePurchase = fmt.Errorf("%w: injected faults act on single purchases only (POST /api/items/:id/purchase); "+
	"send this cart or hold without them", inventory.ErrInvalid)

// singlePurchaseFaults asks Config.Intercept about a cart or hold request: its error is the
// answer, and so is errFaultsSinglePurchase when it would give the request an interceptor.
// inventory.Interceptor stands between the steps of one item's purchase (one lock, one
// write); a cart takes several locks at once and writes in one transaction, so a fault meant
// for a purchase is refused in words rather than silently not injected.
func (s *server) singlePurchaseFaults(c *gin.Context) error {
	if s.intercept == nil {
		return nil
	}
	i, err := s.intercept(c.Request)
	if err != nil {
		return err
	}
	if i != nil {
		return errFaultsSinglePurchase
	}
	return nil
}

// checkout answers 201 with the order of a new cart, or 200 with the original order when the
// Idempotency-Key was already used for the same cart (after merging its lines). In demo mode
// it answers Server-Timing as a purchase does (serverTiming: its work and its wait for the locks).
func (s *server) checkout(c *gin.Context) {
	req, err := s.parseCheckout(c)
	if err != nil {
		s.serverTiming(c, inventory.Spent{})
		writeCartError(c, err)
		return
	}
	rec, err := s.svc.Checkout(c.Request.Context(), req)
	if err != nil {
		s.serverTiming(c, inventory.SpentOf(err))
		writeCartError(c, err)
		return
	}
	s.serverTiming(c, rec.Spent)
	status := http.StatusCreated
	if rec.Replayed {
		status = http.StatusOK
	}
	c.JSON(status, rec)
}

func (s *server) parseCheckout(c *gin.Context) (inventory.CheckoutRequest, error) {
	var req inventory.CheckoutRequest
	var err error
	if err = s.singlePurchaseFaults(c); err != nil {
		return req, err
	}
	if req.IdempotencyKey, err = idempotencyKey(c.Request.Header); err != nil {
		return req, err
	}
	if req.Strategy, req.Work, err = s.demoHeaders(c.Request.Header); err != nil {
		return req, err
	}
	fields, err := decodeObject(c.Request.Body, "lines")
	if err != nil {
		return req, err
	}
	req.Lines, err = parseLines(fields["lines"])
	return req, err
}

// parseLines reads the "lines" array: 1..inventory.MaxCartLines objects of exactly
// {"item_id":N,"quantity":N}, both positive integer literals (the service checks the ranges).
func parseLines(raw json.RawMessage) ([]inventory.CartLine, error) {
	var elems []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return nil, fmt.Errorf("%w: lines must be an array of {\"item_id\":N,\"quantity\":N}", inventory.ErrInvalid)
	}
	if len(elems) > inventory.MaxCartLines {
		return nil, fmt.Errorf("%w: a cart has at most %d lines, got %d", inventory.ErrInvalid, inventory.MaxCartLines, len(elems))
	}
	out := make([]inventory.CartLine, len(elems))
	for i, e := range elems {
		f, err := decodeObject(bytes.NewReader(e), "item_id", "quantity")
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		id, errID := parseQuantity(f["item_id"])
		q, errQ := parseQuantity(f["quantity"])
		switch {
		case errID != nil:
			return nil, fmt.Errorf("%w: line %d: item_id must be a positive integer", inventory.ErrInvalid, i+1)
		case errQ != nil:
			return nil, fmt.Errorf("%w: line %d: quantity must be an integer from 1 to %d", inventory.ErrInvalid, i+1, inventory.MaxQuantity)
		}
		out[i] = inventory.CartLine{ItemID: int64(id), Quantity: q}
	}
	return out, nil
}

// cartErrorBody is the error shape with the short lines of a cart.
type cartErrorBody struct {
	Error cartErrorDetail `json:"error"`
}

type cartErrorDetail struct {
	Code    string                `json:"code"`
	Message string                `json:"message"`
	Lines   []inventory.ShortLine `json:"lines"`
}

// writeCartError is writeError, with the short lines of a cart refused for want of stock.
func writeCartError(c *gin.Context, err error) {
	var short *inventory.ShortLinesError
	if !errors.As(err, &short) {
		writeError(c, err)
		return
	}
	a := classify(err)
	c.Set(ctxKeyErrorCode, a.code)
	c.AbortWithStatusJSON(a.status, cartErrorBody{Error: cartErrorDetail{Code: a.code, Message: a.message, Lines: short.Lines}})
}

// placeHold answers 201 with the new hold, or 200 with the hold as it stands now when the
// Idempotency-Key already placed it (same merged lines, same ttl); in demo mode with
// Server-Timing, as a purchase.
func (s *server) placeHold(c *gin.Context) {
	req, err := s.parseHold(c)
	if err != nil {
		s.serverTiming(c, inventory.Spent{})
		writeCartError(c, err)
		return
	}
	h, err := s.svc.PlaceHold(c.Request.Context(), req)
	if err != nil {
		s.serverTiming(c, inventory.SpentOf(err))
		writeCartError(c, err)
		return
	}
	status := http.StatusCreated
	if h.Replayed {
		status = http.StatusOK
	}
	s.serverTiming(c, h.Spent)
	c.JSON(status, h)
}

func (s *server) parseHold(c *gin.Context) (inventory.HoldRequest, error) {
	var req inventory.HoldRequest
	var err error
	if err = s.singlePurchaseFaults(c); err != nil {
		return req, err
	}
	if req.IdempotencyKey, err = idempotencyKey(c.Request.Header); err != nil {
		return req, err
	}
	var work time.Duration
	if req.Strategy, work, err = s.demoHeaders(c.Request.Header); err != nil {
		return req, err
	}
	if work != 0 {
		return req, fmt.Errorf("%w: a hold does no simulated work; send %s with the checkout", inventory.ErrInvalid, HeaderSimulatedWork)
	}
	fields, err := decodeObject(c.Request.Body, "lines", "ttl")
	if err != nil {
		return req, err
	}
	if req.Lines, err = parseLines(fields["lines"]); err != nil {
		return req, err
	}
	if raw, ok := fields["ttl"]; ok {
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return req, fmt.Errorf("%w: ttl must be a duration string from %s to %s, such as \"90s\" or \"10m\"",
				inventory.ErrInvalid, inventory.MinHoldTTL, inventory.MaxHoldTTL)
		}
		if req.TTL, err = time.ParseDuration(v); err != nil || req.TTL <= 0 {
			return req, fmt.Errorf("%w: ttl %q must be a duration from %s to %s, such as \"90s\" or \"10m\"",
				inventory.ErrInvalid, v, inventory.MinHoldTTL, inventory.MaxHoldTTL)
		}
	}
	return req, nil
}

func (s *server) getHold(c *gin.Context) {
	id, err := holdID(c)
	if err != nil {
		writeError(c, err)
		return
	}
	h, err := s.svc.GetHold(c.Request.Context(), id)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, h)
}

// confirmHold answers 201 with the order of a hold just confirmed, 200 with the same order
// for a hold confirmed before.
func (s *server) confirmHold(c *gin.Context) {
	id, err := holdID(c)
	if err != nil {
		writeError(c, err)
		return
	}
	rec, err := s.svc.ConfirmHold(c.Request.Context(), id)
	if err != nil {
		writeError(c, err)
		return
	}
	status := http.StatusCreated
	if rec.Replayed {
		status = http.StatusOK
	}
	c.JSON(status, rec)
}

func (s *server) cancelHold(c *gin.Context) {
	id, err := holdID(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if err := s.svc.CancelHold(c.Request.Context(), id); err != nil {
		writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// holdID is the :id of a hold route: a positive decimal integer.
func holdID(c *gin.Context) (int64, error) {
	raw := c.Param("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 || raw[0] == '+' {
		return 0, fmt.Errorf("%w: hold id %q must be a positive integer", inventory.ErrInvalid, raw)
	}
	return id, nil
}
