package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/browsertest"
	"github.com/stockguard/stockguard/internal/redistest"
)

// TestShopInBrowser buys from the shop page (`/` without --demo) by keyboard: focus stays on
// the item's button after a purchase; a refusal names the item, not its id; a stopped server
// is told in words, with no uncaught error and the button usable again.
func TestShopInBrowser(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "shop.db"),
		"--redis", rs.URL(), "--admin-token", "shop-token", "--log-level", "warn")
	ctx := browsertest.Start(t)
	first := chromedp.CSS(`#items button[data-id="1"]`)
	waitStatus := func(re string) chromedp.Action[chromedp.Void] {
		return browsertest.Void(chromedp.Poll[bool](fmt.Sprintf(`/%s/.test(document.getElementById('status').textContent)`, re),
			chromedp.WithPollingTimeout(30*time.Second)))
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(first),
		browsertest.Void(chromedp.Evaluate[any](`window.uncaught = [];
			addEventListener('error', (e) => uncaught.push(String(e.message)));
			addEventListener('unhandledrejection', (e) => uncaught.push(String(e.reason)));`)),
		chromedp.Focus(first),
		chromedp.KeyEvent("\r"), // keyboard: Enter on the focused Buy button
		waitStatus(`Order \d+ placed: 99 left`),
	))
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.dataset.id || document.activeElement.tagName`))
	require.NoError(t, err)
	assert.Equal(t, "1", focused, "focus stays on the button the keyboard buyer pressed")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("\r"), waitStatus(`placed: 98 left`)), "Enter again buys again")
	var it item
	require.Equal(t, 200, s.call("GET", "/api/items/1", "", &it))
	assert.Equal(t, 98, it.Stock)

	// Item 2 sells out behind the page's back: the page's refusal names it.
	require.Equal(t, 200, s.call("POST", "/api/admin/reset",
		`{"items":[{"sku":"A","name":"Anorak","stock":5,"price_cents":100},{"sku":"B","name":"Limited drop","stock":1,"price_cents":100}]}`,
		nil, "Authorization: Bearer shop-token"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#items li:nth-child(2) button:enabled`))))
	var items []item
	require.Equal(t, 200, s.call("GET", "/api/items", "", &items))
	require.Equal(t, 201, s.call("POST", fmt.Sprintf("/api/items/%d/purchase", items[1].ID), `{"quantity":1}`, nil))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#items li:nth-child(2) button`)), waitStatus(`Not bought`)))
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
	require.NoError(t, err)
	assert.Equal(t, "Not bought: Limited drop is sold out.", status)

	// The server stops: the buyer is told, the button works again, nothing is uncaught.
	require.Equal(t, 0, s.shutdown())
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#items li:nth-child(1) button`)), waitStatus(`cannot be reached`)))
	enabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.querySelector('#items li:nth-child(1) button').disabled`))
	require.NoError(t, err)
	assert.True(t, enabled, "the button is usable again")
	uncaught, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.uncaught`))
	require.NoError(t, err)
	assert.Empty(t, uncaught)
}
