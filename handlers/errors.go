package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// Errors raised by the HTTP layer itself; writeError maps them together with the inventory
// sentinels.
var (
	errRouteNotFound    = errors.New("no such route")
	errMethodNotAllowed = errors.New("method not allowed on this route")
	errPayloadTooLarge  = errors.New("request body too large")
	errUnauthorized     = errors.New("missing or wrong admin bearer token")
	errDebugDisabled    = errors.New("no such route")
)

// retryAfterSeconds is the Retry-After value sent with 429 and the retryable 503 answers.
const retryAfterSeconds = 1

// errorBody is the shape of every error answer: {"error":{"code":"...","message":"..."}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// apiError is how one error is answered.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter bool // send Retry-After
	logAsError bool // unexpected: log the details, show a generic message
}

// errorTable lists the known errors in the order they are tested; the first match wins.
// A message of "" means the error's own text is shown (it carries details fit for a client).
var errorTable = []struct {
	err error
	api apiError
}{
	{errRouteNotFound, apiError{status: http.StatusNotFound, code: "not_found"}},
	{errDebugDisabled, apiError{status: http.StatusNotFound, code: "not_found"}},
	{errMethodNotAllowed, apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed"}},
	{errPayloadTooLarge, apiError{status: http.StatusRequestEntityTooLarge, code: "payload_too_large"}},
	{errUnauthorized, apiError{status: http.StatusUnauthorized, code: "unauthorized"}},
	{errForbidden, apiError{status: http.StatusForbidden, code: "forbidden"}},
	{errAtCapacity, apiError{status: http.StatusServiceUnavailable, code: "at_capacity", retryAfter: true}},
	{inventory.ErrInvalid, apiError{status: http.StatusBadRequest, code: "invalid_request"}},
	{inventory.ErrNotFound, apiError{status: http.StatusNotFound, code: "not_found"}},
	{inventory.ErrSoldOut, apiError{status: http.StatusConflict, code: "sold_out"}},
	{inventory.ErrInsufficientStock, apiError{status: http.StatusConflict, code: "insufficient_stock"}},
	{inventory.ErrIdempotencyConflict, apiError{status: http.StatusUnprocessableEntity, code: "idempotency_conflict"}},
	{inventory.ErrHoldExpired, apiError{status: http.StatusGone, code: "hold_expired"}},
	{inventory.ErrHoldNotActive, apiError{status: http.StatusConflict, code: "hold_not_active"}},
	{inventory.ErrOverloaded, apiError{status: http.StatusTooManyRequests, code: "overloaded", retryAfter: true}},
	{inventory.ErrLockTimeout, apiError{status: http.StatusServiceUnavailable, code: "lock_timeout", retryAfter: true}},
	{inventory.ErrLockLost, apiError{status: http.StatusServiceUnavailable, code: "lock_lost", retryAfter: true}},
	{inventory.ErrLockNotReplicated, apiError{status: http.StatusServiceUnavailable, code: "lock_not_replicated", retryAfter: true}},
	// The wrapped details of unavailable name hosts and drivers: log them, show the sentinel.
	{inventory.ErrUnavailable, apiError{status: http.StatusServiceUnavailable, code: "unavailable",
		message: inventory.ErrUnavailable.Error() + "; retry later", retryAfter: true}},
	{context.DeadlineExceeded, apiError{status: http.StatusServiceUnavailable, code: "unavailable",
		message: "the request ran out of time; retry later", retryAfter: true}},
	{context.Canceled, apiError{status: http.StatusServiceUnavailable, code: "unavailable",
		message: "the request was cancelled"}},
}

// internalError answers every error that is not in errorTable.
var internalError = apiError{
	status:     http.StatusInternalServerError,
	code:       "internal",
	message:    "internal error; the request id in X-Request-ID identifies it in the server log",
	logAsError: true,
}

// classify is the one mapping from an error to its HTTP answer: an *Error answers as it says,
// the others by errorTable.
func classify(err error) apiError {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		err = errPayloadTooLarge
	}
	if e, ok := errorOf(err); ok {
		return apiError{status: e.Status, code: e.Code, message: err.Error(), retryAfter: e.RetryAfter}
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			a := e.api
			if a.message == "" {
				a.message = err.Error()
			}
			return a
		}
	}
	return internalError
}

// writeError answers err in the error shape of docs/DESIGN.md §11 and aborts the handler chain.
// Unexpected errors are logged with the request id; the client sees a generic message.
func writeError(c *gin.Context, err error) {
	a := classify(err)
	logger := requestLogger(c)
	switch {
	case a.logAsError:
		logger.Error("internal error", "err", err)
	case a.status == http.StatusServiceUnavailable:
		logger.Warn("request not served", "code", a.code, "err", err)
	}
	c.Set(ctxKeyErrorCode, a.code)
	if a.retryAfter {
		c.Header("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	c.AbortWithStatusJSON(a.status, errorBody{Error: errorDetail{Code: a.code, Message: a.message}})
}

// errorCode returns the code writeError answered with, or "" when none was.
func errorCode(c *gin.Context) string {
	return c.GetString(ctxKeyErrorCode)
}

// ErrorAnswer is the HTTP status and error code the API answers err with (classify): the
// simulator (package sim) calls the inventory Service directly and judges each answer as a
// client of the API would see it.
func ErrorAnswer(err error) (status int, code string) {
	a := classify(err)
	return a.status, a.code
}
