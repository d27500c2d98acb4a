package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// purchase answers 201 with the receipt of a new order, or 200 with the original receipt when
// the Idempotency-Key was already used for the same request.
func (s *server) purchase(c *gin.Context) {
	req, err := s.parsePurchase(c)
	var intercept inventory.Interceptor
	if err == nil && s.intercept != nil {
		intercept, err = s.intercept(c.Request)
	}
	if err != nil {
		s.serverTiming(c, inventory.Spent{})
		writeError(c, err)
		s.observePurchase(c, req.Strategy, false, time.Time{})
		return
	}
	start := time.Now()
	ctx := c.Request.Context()
	if intercept != nil {
		ctx = inventory.WithInterceptor(ctx, intercept)
	}
	receipt, err := s.svc.Purchase(ctx, req)
	if err != nil {
		s.serverTiming(c, inventory.SpentOf(err))
		writeError(c, err)
		s.observePurchase(c, req.Strategy, true, start)
		return
	}
	s.serverTiming(c, receipt.Spent)
	status := http.StatusCreated
	if receipt.Replayed {
		status = http.StatusOK
	}
	c.JSON(status, receipt)
	s.observePurchase(c, receipt.Strategy, true, start)
	if receipt.Degraded && !receipt.Replayed && s.offered[receipt.Strategy] {
		s.metrics.observeDegraded(receipt.Strategy)
	}
}

// serverTiming sets, in demo mode, the Server-Timing header of a purchase answer: the
// simulated work spent (work) and the wait for the item's lock (lock), in milliseconds.
func (s *server) serverTiming(c *gin.Context, sp inventory.Spent) {
	if !s.demo {
		return
	}
	c.Header("Server-Timing", "work;dur="+strconv.FormatFloat(msOf(sp.Work), 'f', 3, 64)+
		", lock;dur="+strconv.FormatFloat(msOf(sp.Lock), 'f', 3, 64))
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// parsePurchase builds the service request from the path, headers and body.
func (s *server) parsePurchase(c *gin.Context) (inventory.PurchaseRequest, error) {
	var req inventory.PurchaseRequest
	var err error
	if req.ItemID, err = pathID(c); err != nil {
		return req, err
	}
	if req.IdempotencyKey, err = idempotencyKey(c.Request.Header); err != nil {
		return req, err
	}
	if req.Strategy, req.Work, err = s.demoHeaders(c.Request.Header); err != nil {
		return req, err
	}
	req.Quantity, err = decodeQuantity(c.Request.Body)
	return req, err
}

// idempotencyKey returns the Idempotency-Key header ("" when absent). When present it must be
// one non-empty value; the service checks its length and characters.
func idempotencyKey(h http.Header) (string, error) {
	values, ok := h[http.CanonicalHeaderKey(HeaderIdempotencyKey)]
	if !ok {
		return "", nil
	}
	if len(values) != 1 || values[0] == "" {
		return "", fmt.Errorf("%w: Idempotency-Key must be one value of 1 to %d printable ASCII characters", inventory.ErrInvalid, inventory.MaxIdempotencyKey)
	}
	return values[0], nil
}

// demoHeaders reads X-Strategy and X-Simulated-Work (a Go duration). Outside demo mode any
// demo header (DemoHeaders: these two, X-Fault, X-Barrier) is 400. The service checks the
// strategy name and the work's range.
func (s *server) demoHeaders(h http.Header) (strategy string, work time.Duration, err error) {
	if !s.demo {
		return "", 0, refuseDemoHeaders(h)
	}
	_, hasStrategy := h[http.CanonicalHeaderKey(HeaderStrategy)]
	_, hasWork := h[http.CanonicalHeaderKey(HeaderSimulatedWork)]
	if hasStrategy {
		if strategy = h.Get(HeaderStrategy); strategy == "" {
			return "", 0, fmt.Errorf("%w: %s must name a strategy, one of %q", inventory.ErrInvalid, HeaderStrategy, s.svc.Strategies())
		}
	}
	if hasWork {
		raw := h.Get(HeaderSimulatedWork)
		if work, err = time.ParseDuration(raw); err != nil {
			return "", 0, fmt.Errorf("%w: %s %q must be a Go duration from 0s to %s", inventory.ErrInvalid, HeaderSimulatedWork, raw, inventory.MaxWork)
		}
	}
	return strategy, work, nil
}

// decodeQuantity reads the body {"quantity":N} and returns N, a non-negative integer (the
// service checks its range).
// The body must be exactly that object: field names match exactly (encoding/json alone would
// take "Quantity"), no other or repeated field, nothing after it.
func decodeQuantity(body io.Reader) (int, error) {
	fields, err := decodeObject(body, "quantity")
	if err != nil {
		return 0, err
	}
	return parseQuantity(fields["quantity"])
}

// parseQuantity accepts only a JSON integer literal (no sign, fraction or exponent). One too
// large for an int is kept as the largest int, for the service to refuse as out of range.
func parseQuantity(raw json.RawMessage) (int, error) {
	if len(raw) == 0 {
		return 0, errQuantitySyntax
	}
	for _, ch := range raw {
		if ch < '0' || ch > '9' {
			return 0, errQuantitySyntax
		}
	}
	n, err := strconv.Atoi(string(raw))
	if errors.Is(err, strconv.ErrRange) {
		return math.MaxInt, nil
	}
	return n, err
}

var errQuantitySyntax = fmt.Errorf("%w: quantity must be an integer from 1 to %d", inventory.ErrInvalid, inventory.MaxQuantity)

// decodeObject reads a body that is one JSON object whose field names are among allowed
// (exact, case-sensitive, each at most once), followed by nothing but whitespace, and returns
// each field's raw value. It fails with inventory.ErrInvalid, or keeps the *http.MaxBytesError
// of a body over the limit.
func decodeObject(body io.Reader, allowed ...string) (map[string]json.RawMessage, error) {
	data, err := readBody(body)
	if err != nil {
		return nil, err
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: body must be a JSON object with the fields %q: %s", inventory.ErrInvalid, allowed, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, invalid("not an object")
	}
	fields := make(map[string]json.RawMessage, len(allowed))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid("malformed JSON")
		}
		name, _ := tok.(string)
		if _, seen := fields[name]; seen || !slices.Contains(allowed, name) {
			return nil, invalid("unknown or repeated field %q", name)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, invalid("malformed JSON")
		}
		fields[name] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, invalid("malformed JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("unexpected data after the object")
	}
	return fields, nil
}

// readBody reads the whole body; a body over the limit keeps its *http.MaxBytesError (413),
// other read errors are inventory.ErrInvalid.
func readBody(body io.Reader) ([]byte, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: reading the body: %v", inventory.ErrInvalid, err)
	}
	return data, nil
}

// decodeStrict decodes exactly one JSON value into v: unknown fields and anything but
// whitespace after the value are refused with inventory.ErrInvalid; a body over the limit
// keeps its *http.MaxBytesError (413).
func decodeStrict(body io.Reader, v any) error {
	data, err := readBody(body)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body is not the expected JSON object: %v", inventory.ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: unexpected data after the JSON object", inventory.ErrInvalid)
	}
	return nil
}
