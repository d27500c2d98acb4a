//go:build !leaktest

package main

import (
	"context"
	"log/slog"
	"net/http"
)

// leakTag is the build tag of the test-only leak (leak_on.go).
const leakTag = "leaktest"

// leakPurchases returns h: only a build with the leaktest tag leaks (leak_on.go).
func leakPurchases(_ context.Context, h http.Handler, _ *slog.Logger) http.Handler { return h }
