package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// LineReceipt is one line of a cart order or a hold, as answered.
type LineReceipt struct {
	ItemID     int64 `json:"item_id"`
	Quantity   int   `json:"quantity"`
	Remaining  int   `json:"remaining"`
	FenceToken int64 `json:"fence_token"`
}

// CartReceipt is the body of a 201 or 200 checkout or hold confirmation.
type CartReceipt struct {
	OrderID  int64         `json:"order_id"`
	Lines    []LineReceipt `json:"lines"`
	Strategy string        `json:"strategy"`
	HoldID   int64         `json:"hold_id"`
	Degraded bool          `json:"degraded"`
}

// HoldBody is the body of a 201 or 200 hold placement or of GET /api/holds/:id.
type HoldBody struct {
	ID        int64         `json:"id"`
	Status    string        `json:"status"`
	Lines     []LineReceipt `json:"lines"`
	ExpiresAt time.Time     `json:"expires_at"`
	OrderID   int64         `json:"order_id"`
	Strategy  string        `json:"strategy"`
}

// ShortLine is a line a 409 insufficient_stock names.
type ShortLine struct {
	ItemID    int64 `json:"item_id"`
	Requested int   `json:"requested"`
	Available int   `json:"available"`
}

// CartResult is the outcome of one cart or hold request: Status 0 means no HTTP answer.
type CartResult struct {
	Status  int
	Code    string      // error code of a non-2xx answer, "timeout" or "transport" without answer
	Receipt CartReceipt // a checkout's or confirmation's 2xx
	Hold    HoldBody    // a hold's 201
	Short   []ShortLine // the short lines of a 409
	Start   time.Time
	Latency time.Duration
	Err     error
	WorkMS  float64 // simulated work the server spent on it (Server-Timing work;dur), demo mode
	LockMS  float64 // its wait for the locks (Server-Timing lock;dur), demo mode; 0 for a strategy without lock
}

// cartCall sends one cart or hold request and decodes its answer into r: a 2xx body into
// into (nil: none), an error body's code and short lines into r.
func (a *API) cartCall(ctx context.Context, method, path string, hdr http.Header, body any, into any) (r CartResult) {
	r.Start = time.Now()
	defer func() { r.Latency = time.Since(r.Start) }()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			r.Err, r.Code = err, "transport"
			return r
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, rd)
	if err != nil {
		r.Err, r.Code = err, "transport"
		return r
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := do(a.HC, req)
	if err != nil {
		r.Err, r.Code = err, "transport"
		if IsTimeout(err) {
			r.Code = "timeout"
		}
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	r.WorkMS = timingMS(resp.Header.Get("Server-Timing"), "work")
	r.LockMS = timingMS(resp.Header.Get("Server-Timing"), "lock")
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	switch {
	case err != nil:
		r.Err, r.Code = err, "bad_body"
	case r.Status < 200 || r.Status > 299:
		e := storeapi.DecodeError(r.Status, b)
		r.Err, r.Code = e, e.Code
		var env struct {
			Error struct {
				Lines []ShortLine `json:"lines"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &env) == nil {
			r.Short = env.Error.Lines
		}
	case into != nil && len(b) > 0:
		if err := json.Unmarshal(b, into); err != nil {
			r.Err, r.Code = fmt.Errorf("%s %s: decode: %w", method, path, err), "bad_body"
		}
	}
	return r
}

// RouteHeader names a cart's routing key (docs/DESIGN.md §10.2): deploy/nginx.conf hashes it as
// a purchase's item, the storefront ignores it.
const RouteHeader = "X-Route-Item"

// RouteItem is the routing key of a cart: its lowest item id, as the shop page sends it (0 for
// no lines).
func RouteItem(lines []CartLine) int64 {
	var id int64
	for _, l := range lines {
		if id == 0 || l.ItemID < id {
			id = l.ItemID
		}
	}
	return id
}

// setRoute sets the routing key of a cart of lines.
func setRoute(h http.Header, lines []CartLine) {
	if id := RouteItem(lines); id > 0 {
		h.Set(RouteHeader, strconv.FormatInt(id, 10))
	}
}

// Checkout sends POST /api/checkout, with the cart's routing key (RouteItem).
func (a *API) Checkout(ctx context.Context, lines []CartLine, key, strategy string, work time.Duration) CartResult {
	h := http.Header{}
	setRoute(h, lines)
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	setDemo(h, strategy, work)
	var rec CartReceipt
	r := a.cartCall(ctx, http.MethodPost, "/api/checkout", h, map[string]any{"lines": lines}, &rec)
	r.Receipt = rec
	return r
}

// PlaceHold sends POST /api/holds under key ("": none), with the cart's routing key
// (RouteItem). A 201 or a 200 (the key's hold, as it stands now) fills Hold.
func (a *API) PlaceHold(ctx context.Context, lines []CartLine, key string, ttl time.Duration, strategy string) CartResult {
	h := http.Header{}
	setRoute(h, lines)
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	setDemo(h, strategy, 0)
	var hb HoldBody
	r := a.cartCall(ctx, http.MethodPost, "/api/holds", h, map[string]any{"lines": lines, "ttl": ttl.String()}, &hb)
	r.Hold = hb
	return r
}

// ConfirmHold sends POST /api/holds/:id/confirm.
func (a *API) ConfirmHold(ctx context.Context, id int64) CartResult {
	var rec CartReceipt
	r := a.cartCall(ctx, http.MethodPost, fmt.Sprintf("/api/holds/%d/confirm", id), nil, nil, &rec)
	r.Receipt = rec
	return r
}

// CancelHold sends DELETE /api/holds/:id.
func (a *API) CancelHold(ctx context.Context, id int64) CartResult {
	return a.cartCall(ctx, http.MethodDelete, fmt.Sprintf("/api/holds/%d", id), nil, nil, nil)
}

// GetHold sends GET /api/holds/:id.
func (a *API) GetHold(ctx context.Context, id int64) (HoldBody, error) {
	var hb HoldBody
	_, err := a.Do(ctx, http.MethodGet, fmt.Sprintf("/api/holds/%d", id), nil, nil, &hb)
	return hb, err
}

func setDemo(h http.Header, strategy string, work time.Duration) {
	if strategy != "" {
		h.Set("X-Strategy", strategy)
	}
	if work > 0 {
		h.Set("X-Simulated-Work", work.String())
	}
}

// CartLine is one line of a cart, as sent and as merged.
type CartLine struct {
	ItemID   int64 `json:"item_id"`
	Quantity int   `json:"quantity"`
}
