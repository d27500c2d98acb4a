package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/browsertest"
	"github.com/stockguard/stockguard/internal/redistest"
)

// TestShopInBrowser buys one unit from the shop page (`/` without --demo).
func TestShopInBrowser(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "shop.db"),
		"--redis", rs.URL(), "--admin-token", "shop-token", "--log-level", "warn")
	ctx := browsertest.Start(t)
	first := chromedp.CSS(`#items button[data-id="1"]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(first),
		chromedp.Focus(first),
		chromedp.KeyEvent("\r"), // keyboard: Enter on the focused Buy button
		browsertest.Void(chromedp.Poll[bool](`/Order \d+ placed: 99 left/.test(document.getElementById('status').textContent)`,
			chromedp.WithPollingTimeout(30*time.Second))),
	))
	var it item
	require.Equal(t, 200, s.call("GET", "/api/items/1", "", &it))
	assert.Equal(t, 99, it.Stock)
}
