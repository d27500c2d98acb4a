package handlers

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
)

// Keys of values kept in the gin.Context.
const (
	ctxKeyRequestID = "stockguard.request_id"
	ctxKeyLogger    = "stockguard.logger"
	ctxKeyErrorCode = "stockguard.error_code"
)

// headerRequestID carries the request id in and out.
const headerRequestID = "X-Request-ID"

// requestID takes the client's X-Request-ID when it is 1-128 printable ASCII characters, makes
// one otherwise, echoes it in the answer and gives the request a logger that carries it.
func requestID(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader(headerRequestID)
		if !printableASCII(id, 128) {
			id = newRequestID()
		}
		c.Set(ctxKeyRequestID, id)
		c.Set(ctxKeyLogger, logger.With("request_id", id))
		c.Header(headerRequestID, id)
		c.Next()
	}
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// requestLogger returns the request's logger (with its request id), or slog's default.
func requestLogger(c *gin.Context) *slog.Logger {
	if l, ok := c.Get(ctxKeyLogger); ok {
		if logger, ok := l.(*slog.Logger); ok {
			return logger
		}
	}
	return slog.Default()
}

// accessLog logs one line per request once it has been answered.
func accessLog() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		status := c.Writer.Status()
		level := slog.LevelInfo
		if status >= http.StatusInternalServerError {
			level = slog.LevelWarn
		}
		attrs := []any{
			"method", c.Request.Method,
			"path", c.Request.URL.Path,
			"status", status,
			"duration", time.Since(start),
			"bytes", c.Writer.Size(),
			"remote", c.ClientIP(),
		}
		if code := errorCode(c); code != "" {
			attrs = append(attrs, "code", code)
		}
		requestLogger(c).Log(c.Request.Context(), level, "request", attrs...)
	}
}

// recovery turns a panic in a handler into a logged 500 internal answer (when nothing was
// written yet). http.ErrAbortHandler is re-panicked: net/http uses it to abort a response.
func recovery() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			requestLogger(c).Error("panic in handler", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if c.Writer.Written() {
				c.Abort()
				return
			}
			writeError(c, fmt.Errorf("panic: %v", v))
		}()
		c.Next()
	}
}

// limitBody caps the request body at limit bytes: reading past it fails with
// *http.MaxBytesError, which writeError answers 413 payload_too_large. A Content-Length over
// the limit is refused before the handler runs.
func limitBody(limit int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.ContentLength > limit {
			writeError(c, errPayloadTooLarge)
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
		c.Next()
	}
}

// printableASCII reports whether s has 1..max bytes, each a printable ASCII character
// (space through tilde).
func printableASCII(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
