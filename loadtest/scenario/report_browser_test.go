package scenario

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/browsertest"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/workload"
)

// The HTML report fits a phone's width (the wide table scrolls in its own box), and the
// labels of the log-scale latency axis do not overlap.
func TestReportOnAPhone(t *testing.T) {
	_, srv := testkit.NewFake(t, true)
	rep, err := RunTargets(context.Background(), fakeConfig("guard"), []string{srv.URL}, "t0k", nil, nil)
	require.NoError(t, err)
	// A distribution over three decades ending just past one (700 and 1,000 ms were drawn
	// 12 px apart, on top of each other).
	rep.Strategies[0].Distribution = nil
	for i, ms := range []float64{0.93, 1.5, 3, 7, 15, 40, 90, 250, 700, 1000, 1150} {
		rep.Strategies[0].Distribution = append(rep.Strategies[0].Distribution, report.LatencyPoint{Percentile: float64(10 * i), MS: ms})
	}
	// The carts table of a cart workload (its wide rows scroll in their own box too).
	rep.Strategies[0].Carts = &workload.CartFigures{Workload: config.WorkloadCart, Checkouts: 12345, SoldPerSec: 1234, P99MS: 123, SinglesSoldPerSec: 321,
		LockWaits: []workload.LockWait{{Class: workload.ClassSingle, Answers: 4000, MaxMS: 373, MeanMS: 45}, {Class: workload.ClassHot, Answers: 7000, MaxMS: 374, MeanMS: 44},
			{Class: workload.ClassHotOther, Answers: 9000, MaxMS: 375, MeanMS: 52}, {Class: workload.ClassCold, Answers: 2000, MaxMS: 736, MeanMS: 80}},
		Coalesced: &workload.HoldFigures{Holds: 348, CartHolds: 348, Carts: 2787, CartsPerHold: 8.01, CartsPerCartHold: 8.01}}
	file := filepath.Join(t.TempDir(), "r.html")
	require.NoError(t, rep.WriteHTML(file))

	ctx := browsertest.Start(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile),
		chromedp.Navigate("file://"+file),
		browsertest.Void(chromedp.Poll[bool](`typeof Chart !== 'undefined' && !!Chart.getChart('latency')`, chromedp.WithPollingTimeout(20*time.Second))),
	))
	width, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.documentElement.scrollWidth`))
	require.NoError(t, err)
	assert.LessOrEqual(t, width, 390.0, "the page is no wider than the phone")
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('th')].filter((th) => th.textContent.startsWith('longest lock wait')).length`))
	require.NoError(t, err)
	assert.Equal(t, 4, cells, "the carts table is there, a lock-wait column per class")
	gaps, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const y = Chart.getChart('latency').scales.y;
		const shown = y.getLabelItems().filter((it) => String(it.label) !== '').map((it) => it.options.translation[1]).sort((a, b) => a - b);
		return shown.slice(1).map((p, i) => p - shown[i]);
	})()`))
	require.NoError(t, err)
	require.NotEmpty(t, gaps, "the axis has labels")
	for _, g := range gaps {
		assert.GreaterOrEqual(t, g, 14.0, "two labels of the log axis closer than a line of text (12px) and a gap: %v", gaps)
	}
}
