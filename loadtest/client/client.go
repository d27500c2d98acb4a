// Package client talks to the storefront over HTTP (purchases, carts, holds, the admin reset,
// stats and orders) and keeps a purchase with every attempt of it and every replay.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// API talks to one storefront over HTTP. It is safe for concurrent use.
type API struct {
	Base  string // e.g. http://127.0.0.1:8080, no trailing slash
	Token string // admin token, for reset
	HC    *http.Client
}

// NewHTTPClient returns a client sized for conc concurrent requests per host, with every phase
// of a request bounded: dialing, TLS, and the whole exchange (timeout).
func NewHTTPClient(conc int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil, // loopback only: never through a proxy
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conc * 4,
		MaxIdleConnsPerHost:   conc + 4,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   2 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// apiError is a non-2xx answer of the storefront: status plus the error code of its body.
type apiError = storeapi.Error

// Do sends one request and decodes a 2xx JSON body into out (if not nil). Non-2xx answers are
// returned as *apiError.
func (a *API) Do(ctx context.Context, method, path string, hdr http.Header, in, out any) (int, error) {
	return a.doHeader(ctx, method, path, hdr, in, out, nil)
}

// timingMS returns the dur of metric name in a Server-Timing header value, 0 when absent.
func timingMS(header, name string) float64 {
	for _, m := range strings.Split(header, ",") {
		parts := strings.Split(strings.TrimSpace(m), ";")
		if parts[0] != name {
			continue
		}
		for _, p := range parts[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
	}
	return 0
}

// doHeader is do that also returns the answer's headers in *resHdr (when not nil).
func (a *API) doHeader(ctx context.Context, method, path string, hdr http.Header, in, out any, resHdr *http.Header) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, body)
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := do(a.HC, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resHdr != nil {
		*resHdr = resp.Header
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, storeapi.DecodeError(resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// Item is one catalogue entry of GET /api/items.
type Item struct {
	ID         int64  `json:"id"`
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Stock      int    `json:"stock"`
	PriceCents int64  `json:"price_cents"`
}

// NewItem is one entry of the admin reset body.
type NewItem struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Stock      int    `json:"stock"`
	PriceCents int64  `json:"price_cents"`
}

// ItemStats is one row of GET /api/stats.
type ItemStats struct {
	ItemID        int64  `json:"item_id"`
	SKU           string `json:"sku"`
	InitialStock  int    `json:"initial_stock"`
	Stock         int    `json:"stock"`
	SoldUnits     int    `json:"sold_units"`
	OrderCount    int    `json:"order_count"`
	HeldUnits     int    `json:"held_units"` // units of its active holds (off the stock, not sold)
	OversoldUnits int    `json:"oversold_units"`
}

// Order is one row of GET /api/orders.
type Order struct {
	OrderID        int64     `json:"order_id"`
	ItemID         int64     `json:"item_id"`
	Quantity       int       `json:"quantity"`
	Strategy       string    `json:"strategy"`
	FenceToken     int64     `json:"fence_token"`
	IdempotencyKey *string   `json:"idempotency_key"`
	Degraded       bool      `json:"degraded"`
	BatchID        int64     `json:"batch_id"` // the write transaction (0 from a server without it)
	CreatedAt      time.Time `json:"created_at"`
	// Lines are the order's lines, one per item (nil from a server that does not list them:
	// the cart checks then take them from the answers).
	Lines []LineReceipt `json:"lines,omitempty"`
}

// Receipt is the body of a 201 (or an idempotent 200) purchase answer.
type Receipt struct {
	OrderID    int64  `json:"order_id"`
	ItemID     int64  `json:"item_id"`
	Quantity   int    `json:"quantity"`
	Remaining  int    `json:"remaining"`
	FenceToken int64  `json:"fence_token"`
	Strategy   string `json:"strategy"`
	Retries    int    `json:"retries"`  // version conflicts or aborted transactions (optimistic, watch)
	Degraded   bool   `json:"degraded"` // sold by the guard alone while Redis was down (--on-redis-down guard)
}

func (a *API) Ready(ctx context.Context) error {
	_, err := a.Do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
	return err
}

func (a *API) Reset(ctx context.Context, items []NewItem) error {
	h := http.Header{"Authorization": {"Bearer " + a.Token}}
	_, err := a.Do(ctx, http.MethodPost, "/api/admin/reset", h, map[string]any{"items": items}, nil)
	return err
}

func (a *API) Items(ctx context.Context) ([]Item, error) {
	var out []Item
	_, err := a.Do(ctx, http.MethodGet, "/api/items", nil, nil, &out)
	return out, err
}

func (a *API) Stats(ctx context.Context) ([]ItemStats, error) {
	var out []ItemStats
	_, err := a.Do(ctx, http.MethodGet, "/api/stats", nil, nil, &out)
	return out, err
}

// Orders reads every order, page by page (bounded: at most maxPages pages of 1000).
func (a *API) Orders(ctx context.Context) ([]Order, error) {
	return a.orders(ctx, 0)
}

// ItemOrders reads the orders with a line of item itemID (its purchases and the carts that
// hold it), page by page, as Orders does.
func (a *API) ItemOrders(ctx context.Context, itemID int64) ([]Order, error) {
	return a.orders(ctx, itemID)
}

// orders reads the orders of itemID (every order when 0), page by page.
func (a *API) orders(ctx context.Context, itemID int64) ([]Order, error) {
	const limit, maxPages = 1000, 10000
	var all []Order
	var after int64
	for page := 0; page < maxPages; page++ {
		var out []Order
		q := url.Values{"after_id": {strconv.FormatInt(after, 10)}, "limit": {strconv.Itoa(limit)}}
		if itemID != 0 {
			q.Set("item_id", strconv.FormatInt(itemID, 10))
		}
		if _, err := a.Do(ctx, http.MethodGet, "/api/orders?"+q.Encode(), nil, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out...)
		if len(out) < limit {
			return all, nil
		}
		next := out[len(out)-1].OrderID
		if next <= after {
			return nil, fmt.Errorf("GET /api/orders: page after id %d did not advance", after)
		}
		after = next
	}
	return nil, errors.New("GET /api/orders: too many pages")
}

// Demo reports whether the instance runs in demo mode: it shows its locks (GET
// /api/debug/locks answers; a 404 says it does not).
func (a *API) Demo(ctx context.Context) (bool, error) {
	_, err := storeapi.GetLocks(ctx, a.HC, a.Base)
	if errors.Is(err, storeapi.ErrNotDemo) {
		return false, nil
	}
	return err == nil, err
}

// Strategies asks the instance which strategies it offers and how each behaves.
func (a *API) Strategies(ctx context.Context) ([]storeapi.Strategy, error) {
	return storeapi.Strategies(ctx, a.HC, a.Base)
}

// PurchaseReq is one HTTP purchase attempt.
type PurchaseReq struct {
	ItemID   int64
	Quantity int
	Key      string
	Strategy string        // "" sends no X-Strategy header
	Work     time.Duration // 0 sends no X-Simulated-Work header
	Fault    string        // "" sends no X-Fault header
}

// PurchaseResult is the outcome of one attempt: Status 0 means no HTTP answer (Err says why).
type PurchaseResult struct {
	Status  int
	Code    string // error code of a non-2xx answer, "timeout" or "transport" without answer
	Receipt Receipt
	Start   time.Time // when it was sent
	Latency time.Duration
	Err     error
	WorkMS  float64 // simulated work the server spent on it (Server-Timing work;dur), demo mode
	LockMS  float64 // its wait for the item's lock (Server-Timing lock;dur), demo mode
}

func (a *API) Purchase(ctx context.Context, p PurchaseReq) PurchaseResult {
	h := http.Header{}
	if p.Key != "" {
		h.Set("Idempotency-Key", p.Key)
	}
	if p.Strategy != "" {
		h.Set("X-Strategy", p.Strategy)
	}
	if p.Work > 0 {
		h.Set("X-Simulated-Work", p.Work.String())
	}
	if p.Fault != "" {
		h.Set("X-Fault", p.Fault)
	}
	start := time.Now()
	var r PurchaseResult
	path := "/api/items/" + strconv.FormatInt(p.ItemID, 10) + "/purchase"
	var resHdr http.Header
	r.Status, r.Err = a.doHeader(ctx, http.MethodPost, path, h, map[string]int{"quantity": p.Quantity}, &r.Receipt, &resHdr)
	r.Start, r.Latency = start, time.Since(start)
	r.WorkMS = timingMS(resHdr.Get("Server-Timing"), "work")
	r.LockMS = timingMS(resHdr.Get("Server-Timing"), "lock")
	var ae *apiError
	switch {
	case r.Err == nil:
	case errors.As(r.Err, &ae):
		r.Code = ae.Code
	case r.Status != 0: // 2xx with an undecodable body
		r.Code = "bad_body"
	case IsTimeout(r.Err):
		r.Code = "timeout"
	default:
		r.Code = "transport"
	}
	return r
}

func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
