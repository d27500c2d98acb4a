package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

var update = flag.Bool("update", false, "rewrite the lab screenshots in docs/ (TestLabInBrowser)")

// browser starts Debian's Chromium headless with a fresh profile (make test installs it) and
// returns a chromedp context on one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("chromium is missing: `make test` installs it (apt-get install chromium)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	return ctx
}

// labForm fills the lab's form, submits it from the keyboard (Enter on Run) and waits for
// run number n's verdict, which it returns.
func labForm(ctx context.Context, n int, strategy string, buyers, workMS int, item int64, fault string) (string, error) {
	err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("strategy"), strategy),
		chromedp.SetValue(chromedp.ID("buyers"), strconv.Itoa(buyers)),
		chromedp.SetValue(chromedp.ID("work"), strconv.Itoa(workMS)),
		chromedp.SetValue(chromedp.ID("item"), strconv.FormatInt(item, 10)),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`input[name=fault][value=%q]`, fault))),
		chromedp.Focus(chromedp.ID("run")),
		chromedp.KeyEvent("\r"),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.body.dataset.runs === "%d"`, n), chromedp.WithPollingTimeout(60*time.Second))),
	)
	if err != nil {
		return "", err
	}
	return chromedp.Run(ctx, chromedp.Text(chromedp.ID("verdict")))
}

// void drops an action's value.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// TestLabInBrowser drives the lab in Chromium against `--demo --instances 2`: naive oversells,
// lock+guard is safe, and with the deterministic stall the fence refusal shows in the log.
// With -update it rewrites the screenshots of README (docs/lab-*.png).
func TestLabInBrowser(t *testing.T) {
	s, items := startLab(t, 2)
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
	))

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

	verdict, err = labForm(ctx, 3, "lock+guard", 5, 100, items[2], "stall")
	require.NoError(t, err)
	assert.Regexp(t, `^SAFE`, verdict)
	refusedRow := chromedp.CSS(`#log li[data-kind="fence_refused"]`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(refusedRow)))
	refused, err := chromedp.Run(ctx, chromedp.Text(refusedRow))
	require.NoError(t, err)
	assert.Contains(t, refused, "FENCE REFUSED")
	if *update {
		shot(t, ctx, "docs/lab-fence-refused.png")
	}

	// Replay: scrub to just before the stalled holder's lease ran out, then one step back
	// with the keyboard.
	require.NoError(t, chromedp.Do(ctx,
		void(chromedp.Evaluate[any](`(() => {
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
		shot(t, ctx, "docs/lab-stall-replay.png")
	}
}

// shot writes a screenshot of the whole page to path.
func shot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.FromSlash(path), png, 0o644))
	t.Logf("wrote %s", path)
}

// TestShopInBrowser buys one unit from the shop page (`/` without --demo).
func TestShopInBrowser(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "shop.db"),
		"--redis", rs.URL(), "--admin-token", "shop-token", "--log-level", "warn")
	ctx := browser(t)
	first := chromedp.CSS(`#items button[data-id="1"]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(first),
		chromedp.Focus(first),
		chromedp.KeyEvent("\r"), // keyboard: Enter on the focused Buy button
		void(chromedp.Poll[bool](`/Order \d+ placed: 99 left/.test(document.getElementById('status').textContent)`,
			chromedp.WithPollingTimeout(30*time.Second))),
	))
	var it item
	require.Equal(t, 200, s.call("GET", "/api/items/1", "", &it))
	assert.Equal(t, 99, it.Stock)
}
