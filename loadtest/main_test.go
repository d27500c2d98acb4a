package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stretchr/testify/assert"
)

func TestMainExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 2, Main(context.Background(), []string{"-quantity", "0"}, &out, &errb))
	assert.Equal(t, "loadtest: -quantity must be 1..1000, got 0\n", errb.String())
	errb.Reset()
	assert.Equal(t, 2, Main(context.Background(), []string{"-soak"}, &out, &errb), "-soak without -chaos mix is a usage error")
	assert.Contains(t, errb.String(), "-soak runs under -chaos mix")

	errb.Reset()
	assert.Equal(t, 2, Main(context.Background(), []string{"-target", "http://127.0.0.1:1", "-admin-token", "x"}, &out, &errb))
	assert.Contains(t, errb.String(), "unreachable")
	assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "one line")

	_, srv := testkit.NewFake(t, true)
	dir := t.TempDir()
	errb.Reset()
	code := Main(context.Background(), []string{"-target", srv.URL, "-admin-token", "t0k", "-strategies", "naive,guard",
		"-requests", "100", "-items", "1", "-stock", "10", "-work", "2ms", "-json", filepath.Join(dir, "r.json"),
		"-html", filepath.Join(dir, "r.html")}, &out, &errb)
	assert.Equal(t, 0, code, errb.String())
	assert.FileExists(t, filepath.Join(dir, "r.json"))

	errb.Reset()
	code = Main(context.Background(), []string{"-target", srv.URL, "-admin-token", "t0k", "-strategies", "guard,fast", "-requests", "10"}, &out, &errb)
	assert.Equal(t, 2, code, "a strategy the servers do not offer is a usage error")
	assert.Contains(t, errb.String(), `unknown strategy "fast" (the servers offer: naive, local, lock, guard, lock+guard)`)
	assert.FileExists(t, filepath.Join(dir, "r.html"))
	assert.Contains(t, out.String(), "guard")
}

// TestMainThresholdExitCode: a missed threshold exits 3 (distinct from a broken invariant, 1),
// a met one 0.
func TestMainThresholdExitCode(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	args := []string{"-target", srv.URL, "-admin-token", "t0k", "-strategies", "guard", "-requests", "50", "-items", "1", "-stock", "10", "-work", "0s"}
	var out, errb bytes.Buffer
	assert.Equal(t, report.ExitThreshold, Main(context.Background(), append(args, "-threshold", "p99<1us"), &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "a -threshold was missed")
	assert.Contains(t, out.String(), "MISSED")
	out.Reset()
	errb.Reset()
	assert.Equal(t, 0, Main(context.Background(), append(args, "-threshold", "p99<1m,errors<=100%"), &out, &errb), errb.String())
	assert.NotContains(t, out.String(), "MISSED")
}
