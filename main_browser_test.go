package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
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

// TestShopCartInBrowser fills, checks out and holds a cart on the shop page by keyboard, on a
// phone-wide screen: quantities and Add to cart by arrow keys, Tab and Enter; checkout shows
// the order (and GET /api/orders its lines); a hold counts down by the server's clock and is
// confirmed; a line short of stock is named with its 409 detail; a line is removed; a hold
// that runs out is shown expired and its lines come back; nothing is uncaught and the page
// is no wider than the phone.
func TestShopCartInBrowser(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "cart.db"),
		"--redis", rs.URL(), "--admin-token", "shop-token", "--log-level", "warn")
	require.Equal(t, 200, s.call("POST", "/api/admin/reset", `{"items":[
		{"sku":"A","name":"Anorak","stock":5,"price_cents":4900},
		{"sku":"B","name":"Boots","stock":3,"price_cents":8900},
		{"sku":"C","name":"Cap","stock":2,"price_cents":1500}]}`, nil, "Authorization: Bearer shop-token"))
	var items []item
	require.Equal(t, 200, s.call("GET", "/api/items", "", &items))
	require.Len(t, items, 3)
	anorak, boots, capID := items[0].ID, items[1].ID, items[2].ID

	ctx := browsertest.Start(t)
	waitStatus := func(re string) chromedp.Action[chromedp.Void] {
		return browsertest.Void(chromedp.Poll[bool](fmt.Sprintf(`/%s/.test(document.getElementById('status').textContent)`, re),
			chromedp.WithPollingTimeout(30*time.Second)))
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		require.NoError(t, err, "%s", js)
		return v
	}
	focused := func() string {
		t.Helper()
		return eval(`(() => { const e = document.activeElement; return e.id || (e.dataset.add && 'add-' + e.dataset.add) ||
			(e.dataset.remove && 'remove-' + e.dataset.remove) || e.tagName; })()`)
	}
	status := func() string { t.Helper(); return eval(`document.getElementById('status').textContent`) }
	qty := func(id int64) chromedp.Action[chromedp.Void] {
		return chromedp.Focus(chromedp.ID(fmt.Sprintf("qty-%d", id)))
	}

	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(chromedp.ID(fmt.Sprintf("qty-%d", capID))),
		browsertest.Void(chromedp.Evaluate[any](`window.uncaught = [];
			addEventListener('error', (e) => uncaught.push(String(e.message)));
			addEventListener('unhandledrejection', (e) => uncaught.push(String(e.reason)));`)),
	))
	assert.Equal(t, "true", eval(`String(document.getElementById('checkout').disabled)`), "an empty cart cannot be checked out")

	// Two units of Anorak: arrow up in its quantity field, Tab to its Add button, Enter.
	require.NoError(t, chromedp.Do(ctx, qty(anorak), chromedp.KeyEvent(kb.ArrowUp), chromedp.KeyEvent("\t")))
	assert.Equal(t, fmt.Sprintf("add-%d", anorak), focused(), "Tab goes from the quantity to its Add button")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("\r"), waitStatus(`Added 2 × Anorak`)))
	assert.Equal(t, fmt.Sprintf("add-%d", anorak), focused(), "focus stays on the Add button")
	// One Boots: Enter in the quantity field adds it too.
	require.NoError(t, chromedp.Do(ctx, qty(boots), chromedp.KeyEvent("\r"), waitStatus(`Added 1 × Boots`)))
	assert.Equal(t, "2 × Anorak|1 × Boots", eval(`[...document.querySelectorAll('#cart-lines li span')].map((e) => e.textContent).join('|')`))
	// The link at the top tells the cart's size and takes the keyboard past the list to it.
	assert.Equal(t, "Cart: 2 lines, 3 units", eval(`document.getElementById('cart-link').textContent`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("cart-link")), chromedp.KeyEvent("\r"),
		browsertest.Void(chromedp.Poll[bool](`document.activeElement.id === 'cart-heading'`, chromedp.WithPollingTimeout(10*time.Second)))))

	// Checkout, whose first answer is lost on the way back (the page's fetch fails after the
	// server sold the cart): the page says it does not know, and checking out again replays
	// the order under the same Idempotency-Key instead of selling the cart twice.
	require.NoError(t, chromedp.Do(ctx, browsertest.Void(chromedp.Evaluate[any](`(() => {
		const real = window.fetch;
		window.fetch = async (url, init) => {
			if (/\/api\/(checkout|holds)$/.test(String(url))) (window.routes ??= []).push(init?.headers?.['X-Route-Item']);
			const res = await real(url, init);
			if (String(url).endsWith('/api/checkout') && !window.lostOne) {
				window.lostOne = true;
				throw new TypeError('Failed to fetch');
			}
			return res;
		};
	})()`)), chromedp.Focus(chromedp.ID("checkout")), chromedp.KeyEvent("\r"), waitStatus(`^Not known to be bought`)))
	assert.Equal(t, "status", focused(), "the keyboard is on the words that say so")
	assert.Equal(t, "2 × Anorak|1 × Boots", eval(`[...document.querySelectorAll('#cart-lines li span')].map((e) => e.textContent).join('|')`),
		"the cart is kept")
	// Checkout again: the order is shown, focus on its heading, and the API has one order with
	// its two lines.
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("checkout")), chromedp.KeyEvent("\r"),
		waitStatus(`^Order \d+ placed: 2 × Anorak, 1 × Boots\.$`)))
	assert.Equal(t, "order-heading", focused())
	assert.Equal(t, "2 × Anorak|1 × Boots", eval(`[...document.querySelectorAll('#order-lines li')].map((e) => e.textContent).join('|')`))
	// Both checkouts named the cart's routing key, its lowest item id (deploy/nginx.conf).
	assert.Equal(t, strings.Repeat(strconv.FormatInt(min(anorak, boots), 10)+",", 2), eval(`window.routes.join(',') + ','`),
		"X-Route-Item of each checkout")
	assert.Equal(t, "true", eval(`String(document.getElementById('cart-lines').children.length === 0 && !document.getElementById('cart-empty').hidden)`))
	var orders []struct {
		ItemID int64 `json:"item_id"`
		Lines  []struct {
			ItemID   int64 `json:"item_id"`
			Quantity int   `json:"quantity"`
		} `json:"lines"`
	}
	require.Equal(t, 200, s.call("GET", "/api/orders", "", &orders))
	require.Len(t, orders, 1)
	assert.Equal(t, int64(0), orders[0].ItemID)
	require.Len(t, orders[0].Lines, 2)
	assert.Equal(t, [2]int64{anorak, 2}, [2]int64{orders[0].Lines[0].ItemID, int64(orders[0].Lines[0].Quantity)})
	assert.Equal(t, [2]int64{boots, 1}, [2]int64{orders[0].Lines[1].ItemID, int64(orders[0].Lines[1].Quantity)})

	// Hold one Cap: the countdown runs from the server's ten minutes, focus on Confirm, and the
	// unit is off the stock; Enter confirms. The laptop's clock is an hour fast from here on: a
	// countdown from it would show the hold expired at once.
	require.NoError(t, chromedp.Do(ctx, browsertest.Void(chromedp.Evaluate[any](`(() => {
		const Real = Date, skew = 3600e3;
		window.Date = class extends Real {
			constructor(...a) { super(...(a.length ? a : [Real.now() + skew])); }
			static now() { return Real.now() + skew; }
		};
	})()`))))
	// The hold's first answer is lost on the way back too: the page says it does not know, and
	// holding again shows the hold placed under the same Idempotency-Key (its unit set aside
	// once).
	require.NoError(t, chromedp.Do(ctx, browsertest.Void(chromedp.Evaluate[any](`(() => {
		const real = window.fetch;
		window.fetch = async (url, init) => {
			const res = await real(url, init);
			if (String(url).endsWith('/api/holds') && !window.lostHold) {
				window.lostHold = true;
				throw new TypeError('Failed to fetch');
			}
			return res;
		};
	})()`)), qty(capID), chromedp.KeyEvent("\r"), waitStatus(`Added 1 × Cap`),
		chromedp.Focus(chromedp.ID("hold")), chromedp.KeyEvent("\r"), waitStatus(`^Not known to be held`)))
	assert.Equal(t, "1 × Cap", eval(`[...document.querySelectorAll('#cart-lines li span')].map((e) => e.textContent).join('|')`),
		"the cart is kept")
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("hold")), chromedp.KeyEvent("\r"),
		waitStatus(`^Hold \d+ placed: 1 × Cap set aside`)))
	assert.Equal(t, "confirm", focused())
	first := eval(`document.getElementById('countdown').textContent`)
	assert.Regexp(t, `^(10:00|9:5\d)$`, first)
	require.NoError(t, chromedp.Do(ctx, browsertest.Void(chromedp.Poll[bool](
		fmt.Sprintf(`document.getElementById('countdown').textContent !== %q`, first), chromedp.WithPollingTimeout(10*time.Second)))),
		"the countdown runs")
	// Nine and a half minutes later by the page's clock, the last minute is said once.
	require.NoError(t, chromedp.Do(ctx,
		browsertest.Void(chromedp.Evaluate[any](`(() => { const real = performance.now.bind(performance); performance.now = () => real() + 570e3; })()`)),
		waitStatus(`^Hold \d+: one minute left to confirm it\.$`),
		browsertest.Void(chromedp.Evaluate[any](`delete performance.now`))))
	assert.Equal(t, "confirm", focused(), "said, not focused")
	var it item
	require.Equal(t, 200, s.call("GET", fmt.Sprintf("/api/items/%d", capID), "", &it))
	assert.Equal(t, 1, it.Stock, "the held unit is off the stock, once")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("\r"), waitStatus(`^Hold \d+ confirmed: order \d+ placed: 1 × Cap\.$`)))
	assert.Equal(t, "order-heading", focused())
	assert.Equal(t, "true", eval(`String(document.getElementById('hold-box').hidden)`))

	// Two Boots, but one is sold behind the page's back: the 409 names Boots and its numbers,
	// the line is marked short, nothing is bought.
	require.NoError(t, chromedp.Do(ctx, qty(boots), chromedp.KeyEvent(kb.ArrowUp), chromedp.KeyEvent("\r"), waitStatus(`Added 2 × Boots`)))
	require.Equal(t, 201, s.call("POST", fmt.Sprintf("/api/items/%d/purchase", boots), `{"quantity":1}`, nil))
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("checkout")), chromedp.KeyEvent("\r"), waitStatus(`^Not bought`)))
	assert.Equal(t, "Not bought: not enough stock, so nothing was taken. Boots: 2 asked, 1 available.", status())
	assert.Equal(t, "2 × Boots short: 1 available", eval(`document.querySelector('#cart-lines li.short span').textContent`))
	assert.Equal(t, "cart-heading", focused())
	require.Equal(t, 200, s.call("GET", fmt.Sprintf("/api/items/%d", boots), "", &it))
	assert.Equal(t, 1, it.Stock, "nothing bought")
	// Remove the line by keyboard: the cart is empty, focus on its heading.
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.CSS(fmt.Sprintf(`button[data-remove="%d"]`, boots))),
		chromedp.KeyEvent("\r"), waitStatus(`^Removed Boots from the cart\.$`)))
	assert.Equal(t, "cart-heading", focused())
	assert.Equal(t, "0", eval(`String(document.getElementById('cart-lines').children.length)`))

	// A hold that runs out: two seconds (an option the page does not offer, added here so the
	// test need not wait minutes). The page shows it expired and puts its line back.
	require.NoError(t, chromedp.Do(ctx,
		browsertest.Void(chromedp.Evaluate[any](`(() => { const s = document.getElementById('hold-ttl');
			s.add(new Option('2 seconds', '2s')); s.value = '2s'; })()`)),
		qty(anorak), chromedp.KeyEvent("\r"), waitStatus(`Added 1 × Anorak`),
		chromedp.Focus(chromedp.ID("hold")), chromedp.KeyEvent("\r"), waitStatus(`^Hold \d+ placed`),
		waitStatus(`^Hold \d+ expired: its units are back on sale`)))
	assert.Equal(t, "expired", eval(`document.getElementById('countdown').textContent`))
	assert.Contains(t, eval(`document.getElementById('hold-heading').textContent`), "(expired)")
	assert.Equal(t, "true", eval(`String(document.getElementById('confirm').hidden)`))
	assert.Equal(t, "1 × Anorak", eval(`document.querySelector('#cart-lines li span').textContent`))
	assert.Equal(t, "cart-heading", focused(), "focus leaves the Confirm button that went")

	// A page whose count lags (a background tab's timers are throttled): the page's clock
	// stops while the server's hold runs out, and Confirm is answered 410, shown as expired.
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("hold")), chromedp.KeyEvent("\r"), waitStatus(`^Hold \d+ placed`),
		browsertest.Void(chromedp.Evaluate[any](`(() => { const t = performance.now(); performance.now = () => t; })()`))))
	assert.Equal(t, "confirm", focused())
	var holdID int64
	_, err := fmt.Sscanf(eval(`document.getElementById('hold-heading').textContent`), "Hold %d", &holdID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var h struct{ Status string }
		return s.call("GET", fmt.Sprintf("/api/holds/%d", holdID), "", &h) == 200 && h.Status == "expired"
	}, 20*time.Second, 100*time.Millisecond)
	assert.NotEqual(t, "expired", eval(`document.getElementById('countdown').textContent`), "the page's count has not run out")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("\r"),
		waitStatus(fmt.Sprintf(`^Not confirmed: hold %d expired before it was confirmed\.`, holdID)),
		browsertest.Void(chromedp.Evaluate[any](`delete performance.now`))))
	assert.Equal(t, "expired", eval(`document.getElementById('countdown').textContent`))
	assert.Equal(t, "cart-heading", focused())
	assert.Equal(t, "1 × Anorak", eval(`[...document.querySelectorAll('#cart-lines li span')].map((e) => e.textContent).join('|')`))

	// A hold whose answer is lost and that runs out before the page asks again: holding again
	// under its key says it has ended, and the cart stays for a new hold.
	require.NoError(t, chromedp.Do(ctx, browsertest.Void(chromedp.Evaluate[any](`(() => {
		const real = window.fetch;
		window.fetch = async (url, init) => {
			const res = await real(url, init);
			if (String(url).endsWith('/api/holds') && !window.lostHeld) {
				window.lostHeld = await res.clone().json();
				throw new TypeError('Failed to fetch');
			}
			return res;
		};
	})()`)), chromedp.Focus(chromedp.ID("hold")), chromedp.KeyEvent("\r"), waitStatus(`^Not known to be held`)))
	var lostID int64
	_, err = fmt.Sscanf(eval(`String(window.lostHeld.id)`), "%d", &lostID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var h struct{ Status string }
		return s.call("GET", fmt.Sprintf("/api/holds/%d", lostID), "", &h) == 200 && h.Status == "expired"
	}, 20*time.Second, 100*time.Millisecond)
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("hold")), chromedp.KeyEvent("\r"),
		waitStatus(fmt.Sprintf(`^Hold %d, placed before the shop could answer, is expired now\.`, lostID))))
	assert.Equal(t, "hold", focused())
	assert.Equal(t, "1 × Anorak", eval(`[...document.querySelectorAll('#cart-lines li span')].map((e) => e.textContent).join('|')`),
		"the cart is kept")

	width, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.documentElement.scrollWidth`))
	require.NoError(t, err)
	assert.LessOrEqual(t, width, 390.0, "the page is no wider than the phone")

	// The server stops: checkout says so in words, the cart and its button stay usable.
	require.Equal(t, 0, s.shutdown())
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("checkout")), chromedp.KeyEvent("\r"), waitStatus(`^Not known to be bought: the shop cannot be reached`)))
	assert.Equal(t, "false", eval(`String(document.getElementById('checkout').disabled)`))
	assert.Equal(t, "1 × Anorak", eval(`document.querySelector('#cart-lines li span').textContent`))
	uncaught, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.uncaught`))
	require.NoError(t, err)
	assert.Empty(t, uncaught)
}
