//go:build !nodemo

package lab_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/browsertest"
)

// overlapSentence is how the timeline names a holder working past its lease while another
// holds the same lock: "i0 still working, i1 holding item 4, for 0.31 s (...token 12's
// lease ended at +2.00 s, token 13 took it at +2.01 s)".
var overlapSentence = regexp.MustCompile(`^i(\d) still working, i(\d) holding item (\d+), for (\d+\.\d\d) s \((.*)token (\d+)'s lease ended at \+[\d.]+ s, token (\d+) took it`)

// said returns the timeline's sentences of kind (its summary in words), once there is one
// (the events come on their streams, apart from the run's answer: up to 10 s).
func said(t *testing.T, ctx context.Context, kind string) []string {
	t.Helper()
	_ = chromedp.Do(ctx, browsertest.Void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('#timeline-summary li[data-kind=%q]') !== null`, kind),
		chromedp.WithPollingTimeout(10*time.Second))))
	return saidNow(t, ctx, kind)
}

// saidNow returns the timeline's sentences of kind now.
func saidNow(t *testing.T, ctx context.Context, kind string) []string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
		`[...document.querySelectorAll('#timeline-summary li[data-kind=%q]')].map((li) => li.textContent)`, kind)))
	require.NoError(t, err)
	return out
}

// count returns how many elements of the timeline's drawing match css.
func count(t *testing.T, ctx context.Context, css string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('#timeline-box %s').length`, css)))
	require.NoError(t, err)
	return n
}

// overlapsOn checks that the timeline names at least one overlap on item, and returns the
// tokens of the first one (the holder past its lease, the next holder) and its lock's words.
func overlapsOn(t *testing.T, ctx context.Context, item int64) (late, next int64, lock string) {
	t.Helper()
	sentences := said(t, ctx, "overlap")
	require.NotEmpty(t, sentences, "the timeline names a holder working past its lease while another holds the lock")
	m := overlapSentence.FindStringSubmatch(sentences[0])
	require.NotNil(t, m, "%q", sentences[0])
	assert.Equal(t, strconv.FormatInt(item, 10), m[3], sentences[0])
	d, _ := strconv.ParseFloat(m[4], 64)
	assert.Positive(t, d, sentences[0])
	late, _ = strconv.ParseInt(m[6], 10, 64)
	next, _ = strconv.ParseInt(m[7], 10, 64)
	assert.Greater(t, next, late, "the later holder has the larger token: %s", sentences[0])
	assert.Positive(t, count(t, ctx, `.tl-overlap`), "the overlap is highlighted on the drawing")
	assert.Positive(t, count(t, ctx, `.tl-past`), "the bar past the lease's end is hatched")
	return late, next, m[5]
}

// TestLabInBrowserTimeline drives the lab's timeline in Chromium against `--demo --instances 3`
// with the demo's lease (2 s): lock with the stall fault draws the stalled holder working past
// its lease while another holds the item, named in words, and its late write accepted;
// lock+guard with the stall fault marks the late holder's write refused; fixed-lease with the
// form's defaults draws the same overlap on the pitfall lock's rows. The timeline follows the
// replay slider, and at 390 px its axis scrolls inside its box while the page does not scroll
// sideways. With -update it writes docs/lab-timeline.png.
func TestLabInBrowserTimeline(t *testing.T) {
	s, items := startLab(t, 3)
	ctx := browsertest.Start(t)
	t.Cleanup(func() {
		if t.Failed() { // what the page said, to see why
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('timeline-summary').innerText + '\n' + document.getElementById('log').innerText`))
			t.Logf("the timeline's words and the log:\n%s", text)
		}
	})
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
	))

	// lock, the stall fault: the first holder stalls three leases before its write; the
	// others take the lock when its lease runs out, and the late write is accepted.
	verdict, err := labForm(ctx, 1, "lock", 4, 300, items[0], "stall")
	require.NoError(t, err)
	assert.NotRegexp(t, `^SAFE`, verdict, "an unfenced late write loses an update")
	late, _, lock := overlapsOn(t, ctx, items[0])
	assert.Equal(t, "lock: ", lock, "the item's real lock")
	accepted := said(t, ctx, "late")
	require.NotEmpty(t, accepted, "the late write is named")
	assert.Contains(t, accepted[0], fmt.Sprintf("write with token %d on item %d accepted", late, items[0]))
	assert.Positive(t, count(t, ctx, `.tl-write.late[data-write="accepted late"]`))
	assert.Positive(t, count(t, ctx, `.tl-stall`), "the stall is drawn as its own span")

	// Replay: scrub to the run's start (nothing has happened yet), one step on with the
	// keyboard, then back to live: the whole run again.
	require.NoError(t, chromedp.Do(ctx,
		browsertest.Void(chromedp.Evaluate[any](`(() => {
			const s = document.getElementById('scrub');
			s.value = s.min;
			s.dispatchEvent(new Event('input'));
		})()`)),
		chromedp.Focus(chromedp.ID("scrub")),
		chromedp.KeyEvent(kb.ArrowRight),
	))
	clock, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("timeline-clock")))
	require.NoError(t, err)
	assert.Contains(t, clock, "replay at +0.0")
	assert.Empty(t, saidNow(t, ctx, "overlap"), "at the run's start nothing overlaps yet")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("live"))))
	assert.NotEmpty(t, said(t, ctx, "overlap"), "back to live: the whole run")

	// lock+guard, the stall fault: the late holder's write is refused by the fence.
	verdict, err = labForm(ctx, 2, "lock+guard", 4, 300, items[1], "stall")
	require.NoError(t, err)
	assert.Regexp(t, `^SAFE`, verdict)
	late, next, _ := overlapsOn(t, ctx, items[1])
	refused := said(t, ctx, "refused")
	require.NotEmpty(t, refused, "the refused write is named")
	assert.Contains(t, refused[0], fmt.Sprintf("write with token %d on item %d refused by the fence", late, items[1]))
	assert.Positive(t, count(t, ctx, fmt.Sprintf(`g.tl-hold[data-token="%d"] .tl-write.refused[data-write="refused"]`, late)),
		"the refused mark is on the late holder's bar")
	assert.Greater(t, next, late)
	if *update { // README's picture of the lab: Kleppmann's, the pause, the second holder, the fence
		sectionShot(t, ctx, "../docs/lab-timeline.png")
	}

	// fixed-lease with the form's defaults: work outlives the pitfall lock's fixed lease.
	defaults, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`['buyers', 'work'].map((id) => document.getElementById(id).defaultValue)`))
	require.NoError(t, err)
	buyers, _ := strconv.Atoi(defaults[0])
	work, _ := strconv.Atoi(defaults[1])
	verdict, err = labForm(ctx, 3, "fixed-lease", buyers, work, items[2], "")
	require.NoError(t, err)
	assert.NotRegexp(t, `^SAFE`, verdict, "fixed-lease with the form's defaults (%d buyers, %d ms)", buyers, work)
	_, _, lock = overlapsOn(t, ctx, items[2])
	assert.Equal(t, "fixed-lease lock: ", lock)
	if *update {
		sectionShot(t, ctx, "../docs/lab-timeline-fixed-lease.png")
	}

	// del-release: the late holder's plain DEL deletes the next holder's key, and a third
	// buyer holds the lock beside the second.
	verdict, err = labForm(ctx, 4, "del-release", 6, 700, items[0], "") // 700 ms: A releases mid-way through B's lease
	require.NoError(t, err)
	assert.NotRegexp(t, `^SAFE`, verdict)
	deleted := false
	for _, sentence := range said(t, ctx, "overlap") {
		deleted = deleted || regexp.MustCompile(`^i\d holding, i\d holding item \d+ too, for [\d.]+ s \(del-release lock: i\d's release of token \d+, past its lease, deleted token \d+'s key`).MatchString(sentence)
	}
	assert.True(t, deleted, "a DEL past the lease let a third holder in beside the second: %q", saidNow(t, ctx, "overlap"))

	// A phone: the page fits, the timeline's axis scrolls inside its box.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
	require.NoError(t, chromedp.Do(ctx, browsertest.Void(chromedp.Poll[bool](
		`document.documentElement.clientWidth === 390 && document.getElementById('timeline-box').clientWidth < 390`))))
	widths, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => { const d = document.documentElement, b = document.getElementById('timeline-box');
		return [d.scrollWidth, d.clientWidth, b.scrollWidth, b.clientWidth]; })()`))
	require.NoError(t, err)
	assert.LessOrEqual(t, widths[0], widths[1], "no sideways page scroll at 390 px: %v", widths)
	assert.Greater(t, widths[2], widths[3], "the axis scrolls inside its box: %v", widths)
	assert.NotEmpty(t, said(t, ctx, "overlap"), "the words are there on a phone too")
}

// sectionShot writes a screenshot of the timeline's section to path.
func sectionShot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(`section.timeline`)))
	require.NoError(t, err)
	writeShot(t, path, png)
}
