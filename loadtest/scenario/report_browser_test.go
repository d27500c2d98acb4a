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
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/soak"
)

// phoneSoak is a soak of two metrics whose series have the long names of a run with restarts
// and strategies, the second of them a LEAK.
func phoneSoak() *soak.Result {
	res := &soak.Result{Every: 2, Warmup: 20, Series: map[string]map[string][]soak.Point{}, Bounds: map[string]string{}}
	for _, m := range []soak.Metric{soak.Goroutines, soak.RedisClients} {
		res.Metrics = append(res.Metrics, m)
		res.Bounds[m.Name] = m.Why
		res.Series[m.Name] = map[string][]soak.Point{}
		for k, name := range []string{"i0r12@1795751168 [lock+guard]", "i1@1795750445 [lock+guard]", "redis [lock+guard]"} {
			var pts []soak.Point
			for i := range 60 {
				pts = append(pts, soak.Point{At: float64(2 * i), Value: 40 + float64(k*i)})
			}
			res.Series[m.Name][name] = pts
			res.Fits = append(res.Fits, soak.Judge(m, name, pts, 20*time.Second))
		}
	}
	return res
}

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
	rep.Soak = phoneSoak()
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
	plots, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[...document.querySelectorAll('svg.soak')].map((s) => s.getBoundingClientRect().right)`))
	require.NoError(t, err)
	require.Len(t, plots, 2, "a plot a soak metric")
	for _, right := range plots {
		assert.LessOrEqual(t, right, 390.0, "a soak plot fits the phone")
	}
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
