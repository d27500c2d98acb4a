package handlers

import (
	"errors"
	"io"
	"log/slog"

	"github.com/gin-gonic/gin"
)

// What an extension's routes (Config.Extend) share with the storefront's: the error answer,
// the strict JSON body, the body limit and the request's logger (ItemViews: catalogue.go).

// Error is an error that carries its own answer, for an extension's errors: WriteError answers
// it with Status and the code Code, the message being the whole error's text.
type Error struct {
	Status     int // the HTTP status of the answer
	Code       string
	Message    string
	RetryAfter bool // send Retry-After (a 429 or 503 that may be retried)
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// WriteError answers err in the storefront's one error shape {"error":{"code","message"}}
// and aborts the handler chain: an *Error with its own status and code, any other error as
// the storefront maps it (inventory.ErrInvalid is 400 invalid_request, ErrUnavailable 503...).
func WriteError(c *gin.Context, err error) { writeError(c, err) }

// DecodeJSON decodes a body that is exactly one JSON value into v: unknown fields and anything
// after the value are refused with inventory.ErrInvalid.
func DecodeJSON(body io.Reader, v any) error { return decodeStrict(body, v) }

// LimitBody caps the request body at limit bytes (413 payload_too_large beyond).
func LimitBody(limit int64) gin.HandlerFunc { return limitBody(limit) }

// RequireAdmin returns the middleware of the admin routes for an extension's routes: it lets a
// request through only with "Authorization: Bearer <token>" (401 unauthorized otherwise; an
// empty token refuses every request).
func RequireAdmin(token string) gin.HandlerFunc { return (&server{adminToken: token}).requireAdmin }

// RequestLogger returns the request's logger, which carries its request id.
func RequestLogger(c *gin.Context) *slog.Logger { return requestLogger(c) }

// errorOf returns the *Error in err's chain, if any.
func errorOf(err error) (*Error, bool) {
	var e *Error
	return e, errors.As(err, &e)
}
