//go:build !nodemo

package lab_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/browsertest"
)

var update = flag.Bool("update", false, "rewrite the lab screenshots in docs/ (TestLabInBrowser)")

// labForm fills the lab's form (buyers and work 0: the form's defaults), submits it from the
// keyboard (Enter on Run), checks that the verdict line says the run is running meanwhile,
// and waits for run number n's verdict, which it returns.
func labForm(ctx context.Context, n int, strategy string, buyers, workMS int, item int64, fault string) (string, error) {
	fill := []chromedp.Action[chromedp.Void]{chromedp.SetValue(chromedp.ID("strategy"), strategy)}
	if buyers > 0 {
		fill = append(fill, chromedp.SetValue(chromedp.ID("buyers"), strconv.Itoa(buyers)),
			chromedp.SetValue(chromedp.ID("work"), strconv.Itoa(workMS)))
	}
	fill = append(fill,
		chromedp.SetValue(chromedp.ID("item"), strconv.FormatInt(item, 10)),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`input[name=fault][value=%q]`, fault))),
		chromedp.Focus(chromedp.ID("run")),
		chromedp.KeyEvent("\r"),
	)
	if err := chromedp.Do(ctx, fill...); err != nil {
		return "", err
	}
	running, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("verdict")))
	if err != nil {
		return "", err
	}
	if ran, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.runs || "0"`)); ran != strconv.Itoa(n) && !strings.HasPrefix(running, "Running") {
		return "", fmt.Errorf("run %d: while it runs the verdict line reads %q, not Running", n, running)
	}
	err = chromedp.Do(ctx,
		browsertest.Void(chromedp.Poll[bool](fmt.Sprintf(`document.body.dataset.runs === "%d"`, n), chromedp.WithPollingTimeout(60*time.Second))))
	if err != nil {
		return "", err
	}
	return chromedp.Run(ctx, chromedp.Text(chromedp.ID("verdict")))
}

// TestLabInBrowser drives the lab in Chromium against `--demo --instances 3` with the demo's
// lease: naive oversells; lock+guard is safe; with the deterministic stall the fence refusal
// shows in the log, every run; the verdict line says "Running" during a run. On loopback the
// admin token field is not shown; at 390 px, after the runs, the page does not scroll
// sideways. With -update it rewrites the screenshots of README (docs/lab-*.png).
func TestLabInBrowser(t *testing.T) {
	s, items := startLab(t, 3)
	ctx := browsertest.Start(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
	))
	assert.Equal(t, "none", tokenFieldDisplay(t, ctx), "on loopback the lab takes no token: its field is not shown")

	verdict, err := labForm(ctx, 1, "naive", 20, 50, items[0], "")
	require.NoError(t, err)
	m := regexp.MustCompile(`oversold (\d+)`).FindStringSubmatch(verdict)
	require.NotNil(t, m, verdict)
	oversold, _ := strconv.Atoi(m[1])
	assert.Regexp(t, `^OVERSOLD`, verdict)
	assert.Positive(t, oversold, verdict)

	verdict, err = labForm(ctx, 2, "lock+guard", 20, 20, items[1], "")
	require.NoError(t, err)
	assert.Regexp(t, `^SAFE`, verdict)
	assert.Contains(t, verdict, "sold 10 ")

	verdict, err = labForm(ctx, 3, "lock+guard", 20, 200, items[2], "stall")
	require.NoError(t, err)
	assert.Regexp(t, `^SAFE`, verdict)
	refusedRow := chromedp.CSS(`#log li[data-kind="fence_refused"]`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(refusedRow)))
	refused, err := chromedp.Run(ctx, chromedp.Text(refusedRow))
	require.NoError(t, err)
	assert.Contains(t, refused, "FENCE REFUSED")
	if *update {
		shot(t, ctx, "../docs/lab-fence-refused.png")
	}

	// Replay: scrub to just before the stalled holder's lease ran out, then one step back
	// with the keyboard.
	require.NoError(t, chromedp.Do(ctx,
		browsertest.Void(chromedp.Evaluate[any](`(() => {
			const lost = document.querySelector('#log li[data-kind="lost"]');
			const s = document.getElementById('scrub');
			s.value = Number(lost.dataset.t) - 200;
			s.dispatchEvent(new Event('input'));
		})()`)),
		chromedp.Focus(chromedp.ID("scrub")),
		chromedp.KeyEvent(kb.ArrowLeft), // keyboard users scrub too
	))
	clock, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("clock")))
	require.NoError(t, err)
	lanes, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("lanes")))
	require.NoError(t, err)
	assert.Contains(t, clock, "replay at")
	assert.Contains(t, lanes, "holds token", "the stalled holder, just before its lease ran out")
	if *update {
		shot(t, ctx, "../docs/lab-stall-replay.png")
	}

	// The cart pitfalls next to their fixes, on a fresh catalogue: the crossed carts of
	// request-order are both refused at the lock wait; lock+guard sells both; two lines of one
	// item checked one at a time oversell, merged they are refused.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("live")),
		chromedp.Focus(chromedp.ID("reset")),
		chromedp.KeyEvent("\r"),
		browsertest.Void(chromedp.Poll[bool](`[...document.querySelectorAll('#item option')].every((o) => o.textContent.includes('(10 in stock)'))`,
			chromedp.WithPollingTimeout(30*time.Second))),
	))
	fresh, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#item option')].map((o) => o.value)`))
	require.NoError(t, err)
	require.Len(t, fresh, 3, "the reset's new items")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("item"), fresh[0]),
		chromedp.SetValue(chromedp.ID("work"), "100"),
	))
	verdict, err = cartForm(ctx, 1, "cart-order request-order")
	require.NoError(t, err)
	assert.Regexp(t, `^BLOCKED`, verdict)
	assert.Contains(t, verdict, "sold 0 ")
	assert.Contains(t, verdict, "lock_timeout 2")
	crossed := said(t, ctx, "crossed")
	require.NotEmpty(t, crossed, "the timeline names the crossed carts")
	assert.Regexp(t, `^crossed carts: i\d holds item \d+ and waits for item \d+, i\d holds item \d+ and waits for item \d+, for [\d.]+ s`, crossed[0])
	if *update {
		sectionShot(t, ctx, "../docs/lab-timeline-carts.png")
	}
	verdict, err = cartForm(ctx, 2, "cart-order lock+guard")
	require.NoError(t, err)
	assert.Regexp(t, `^SAFE`, verdict)
	assert.Contains(t, verdict, "sold 4 ")
	verdict, err = cartForm(ctx, 3, "cart-lines line-by-line")
	require.NoError(t, err)
	assert.Regexp(t, `^OVERSOLD`, verdict)
	assert.Contains(t, verdict, "item "+fresh[0]+" 8 → -8", "each line asked the 8 left after the two carts")
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("item"), fresh[2])))
	verdict, err = cartForm(ctx, 4, "cart-lines guard")
	require.NoError(t, err)
	assert.Regexp(t, `^SAFE`, verdict)
	assert.Contains(t, verdict, "insufficient_stock 1")

	// A phone, after the runs: no sideways scroll (the cart select and the fault labels wrap).
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		browsertest.Void(chromedp.Poll[bool](`document.documentElement.clientWidth === 390`)),
	))
	widths, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
	require.NoError(t, err)
	assert.LessOrEqual(t, widths[0], widths[1], "scrollWidth <= clientWidth at 390 px")
	t.Logf("at 390 px after the runs: scrollWidth %v, clientWidth %v", widths[0], widths[1])
	assert.Equal(t, "none", tokenFieldDisplay(t, ctx))
}

// tokenFieldDisplay returns the computed display of the admin token field (what a person
// sees: "none" is not shown).
func tokenFieldDisplay(t *testing.T, ctx context.Context) string {
	t.Helper()
	d, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById('token-field')).display`))
	require.NoError(t, err)
	return d
}

// A lab that listens beyond loopback (RequireToken) shows the admin token field, and its note.
func TestLabInBrowserTokenField(t *testing.T) {
	e := newEnv(t, envOptions{lease: 2 * time.Second, lockWait: 2 * time.Second, requireToken: true})
	ctx := browsertest.Start(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
	))
	assert.NotEqual(t, "none", tokenFieldDisplay(t, ctx), "the field is shown when the lab requires the token")
	visible, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const r = document.getElementById('token').getBoundingClientRect();
		return r.width > 0 && r.height > 0 && getComputedStyle(document.getElementById('token')).visibility === 'visible'; })()`))
	require.NoError(t, err)
	assert.True(t, visible, "the token input has a box a person can see")
}

// cartForm picks a cart run (the value of the cart select: case and strategy), submits it
// from the keyboard (Enter on Run carts), and waits for cart run number n's verdict, which
// it returns.
func cartForm(ctx context.Context, n int, value string) (string, error) {
	err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("cart-case"), value),
		chromedp.Focus(chromedp.ID("cart-run")),
		chromedp.KeyEvent("\r"),
		browsertest.Void(chromedp.Poll[bool](fmt.Sprintf(`document.body.dataset.cartRuns === "%d"`, n), chromedp.WithPollingTimeout(60*time.Second))),
	)
	if err != nil {
		return "", err
	}
	return chromedp.Run(ctx, chromedp.Text(chromedp.ID("cart-verdict")))
}

// shot writes a screenshot of the whole page to path.
func shot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	writeShot(t, path, png)
}

// writeShot writes a screenshot to path.
func writeShot(t *testing.T, path string, png []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.FromSlash(path), png, 0o644))
	t.Logf("wrote %s", path)
}
