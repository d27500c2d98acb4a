//go:build !leaktest

package handlers

import (
	"context"
	"log/slog"
	"net/http"
)

// LeakTag is the build tag of the test-only leak (leak_on.go).
const LeakTag = "leaktest"

// LeakPurchases returns h: only a build with the leaktest tag leaks (leak_on.go).
func LeakPurchases(_ context.Context, h http.Handler, _ *slog.Logger) http.Handler { return h }
