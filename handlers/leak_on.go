//go:build leaktest

package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
)

// LeakTag is the build tag of this file.
const LeakTag = "leaktest"

// LeakPurchases makes the storefront keep one goroutine per purchase it answers (a single
// purchase or a cart checkout), each blocked until the server stops (ctx ends): a leak on
// purpose, for the load test's soak to catch (go_goroutines grows with the purchases). Only
// `go build -tags leaktest` builds it; it logs a warning at start.
func LeakPurchases(ctx context.Context, h http.Handler, logger *slog.Logger) http.Handler {
	logger.Warn("built with -tags " + LeakTag + ": one goroutine is kept per purchase until shutdown (a test-only leak)")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if isPurchase(r) {
			go func() { <-ctx.Done() }() // owner: the server's context, which ends at shutdown
		}
	})
}

// isPurchase tells the purchase routes: POST /api/items/:id/purchase and POST /api/checkout.
func isPurchase(r *http.Request) bool {
	p := r.URL.Path
	return r.Method == http.MethodPost &&
		(p == "/api/checkout" || strings.HasPrefix(p, "/api/items/") && strings.HasSuffix(p, "/purchase"))
}
