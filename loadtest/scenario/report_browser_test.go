package scenario

import (
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/browsertest"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/soak"
	"github.com/stockguard/stockguard/loadtest/workload"
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
	// The carts table of a cart workload (its wide rows scroll in their own box too).
	rep.Strategies[0].Carts = &workload.CartFigures{Workload: config.WorkloadCart, Checkouts: 12345, SoldPerSec: 1234, P99MS: 123, SinglesSoldPerSec: 321,
		LockWaits: []workload.LockWait{{Class: workload.ClassSingle, Answers: 4000, MaxMS: 373, MeanMS: 45}, {Class: workload.ClassHot, Answers: 7000, MaxMS: 374, MeanMS: 44},
			{Class: workload.ClassHotOther, Answers: 9000, MaxMS: 375, MeanMS: 52}, {Class: workload.ClassCold, Answers: 2000, MaxMS: 736, MeanMS: 80}},
		Coalesced: &workload.HoldFigures{Holds: 348, CartHolds: 348, Carts: 2787, CartsPerHold: 8.01, CartsPerCartHold: 8.01}}
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
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('th')].filter((th) => th.textContent.startsWith('longest lock wait')).length`))
	require.NoError(t, err)
	assert.Equal(t, 4, cells, "the carts table is there, a lock-wait column per class")
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

// svgElems returns every element of the lanes' SVG in page (one XML document: laneStrip
// writes it well-formed) with its attributes and the text of its title.
func svgElems(t *testing.T, page string) []svgElem {
	t.Helper()
	from := strings.Index(page, `<svg class="lanes-svg"`)
	require.GreaterOrEqual(t, from, 0, "the report draws the lanes")
	to := strings.Index(page[from:], "</svg>")
	require.Positive(t, to)
	dec := xml.NewDecoder(strings.NewReader(page[from : from+to+len("</svg>")]))
	var out []svgElem
	var stack []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElem{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				e.attr[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if n := len(stack); n > 1 && out[stack[n-1]].name == "title" {
				out[stack[n-2]].title += string(tok)
			}
		}
	}
	return out
}

type svgElem struct {
	name, title string
	attr        map[string]string
}

func (e svgElem) is(class string) bool {
	return slices.Contains(strings.Fields(e.attr["class"]), class)
}

// TestPauseLanesReport runs -chaos pause on lock+guard and finds, in the HTML report, the hot
// item's lock drawn from the instances' event streams: bars on several instances, the paused
// holder's bar with its token, the SIGSTOP span on its row, and its late step: the write the
// fence refused, or the loss its watchdog told first (the run's pause verdict says which; up to
// three runs for a refused write). Then, in Chromium at 390 px, the page does not scroll
// sideways while the drawing scrolls in its own box.
func TestPauseLanesReport(t *testing.T) {
	testkit.NeedStorefront(t)
	ctx := context.Background()
	cfg := smallRun("lock+guard")
	cfg.Chaos, cfg.Lease = fault.ChaosPause, 500*time.Millisecond
	cfg.Requests, cfg.Duration, cfg.Stock = 0, 3500*time.Millisecond, 5000
	require.NoError(t, validate(&cfg))
	cl, err := cluster.Start(ctx, cluster.Config{Bin: testkit.Storefront, Instances: 3, Lease: cfg.Lease})
	require.NoError(t, err)
	defer cl.Close()

	file := filepath.Join(t.TempDir(), "r.html")
	var page string
	var elems []svgElem
	var ev *fault.Event
	refused := false
	for run := 1; run <= 3 && !refused; run++ {
		cfg.Seed++
		rep, err := RunTargets(ctx, cfg, cl.URLs(), cl.AdminToken, cl, testkit.Tlog{T: t})
		require.NoError(t, err)
		s := rep.Strategies[0]
		assert.Equal(t, verdict.Safe, s.Verdict, s.Violations)
		ev = s.Chaos
		require.NotNil(t, ev)
		require.True(t, ev.Paused && ev.Confirmed && ev.Token > 0, "the hot lock's holder was paused: %s", ev)
		require.NotNil(t, ev.Lanes, "the pause run recorded the lanes")
		require.NoError(t, rep.WriteHTML(file))
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		page = string(b)
		elems = svgElems(t, page)
		token := strconv.FormatInt(ev.Token, 10)
		for _, e := range elems {
			refused = refused || (e.is("write") && e.is("refused") && e.attr["data-token"] == token)
		}
		t.Logf("run %d: %s; holder wrote %s; refused write drawn: %v; lanes: %d events, overlaps %+v, notes %v",
			run, ev, ev.HolderWrote, refused, ev.Lanes.Events, ev.Lanes.Overlaps, ev.Lanes.Notes)
	}
	inst, token := strconv.Itoa(ev.Instance), strconv.FormatInt(ev.Token, 10)
	rows := map[string]bool{}
	pausedBar, pauseSpan, lost := false, false, false
	for _, e := range elems {
		switch {
		case e.is("hold"):
			rows[e.attr["data-instance"]] = true
			pausedBar = pausedBar || (e.attr["data-instance"] == inst && e.attr["data-token"] == token)
		case e.is("pause"):
			pauseSpan = pauseSpan || e.attr["data-instance"] == inst
		case e.is("lost"):
			lost = lost || strings.Contains(e.title, "token "+token+" learned of the loss")
		}
	}
	assert.GreaterOrEqual(t, len(rows), 2, "holds drawn on several instances: %v", rows)
	assert.True(t, pausedBar, "the paused holder's bar, token %s on instance %s", token, inst)
	assert.True(t, pauseSpan, "the SIGSTOP span on instance %s's row", inst)
	assert.True(t, refused || lost, "the resumed holder's write refused by the fence, or its loss told first")
	if refused {
		assert.Regexp(t, `writes? with token `+token+` .*at \+[0-9.]+ s.*: refused by the fence`, page)
	}
	assert.Contains(t, page, "still working (token "+token+")", "the overlap said in words")
	assert.Contains(t, page, "One clock:")

	bctx := browsertest.Start(t)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile),
		chromedp.Navigate("file://"+file),
		chromedp.WaitVisible(chromedp.CSS(`.lanes-svg`)),
	))
	dims, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](`(() => {
		const box = document.querySelector('.lanes-scroll');
		return [document.documentElement.scrollWidth, box.scrollWidth, box.clientWidth, box.getBoundingClientRect().right];
	})()`))
	require.NoError(t, err)
	t.Logf("page %.0f px wide; the drawing %.0f px in a box of %.0f px ending at %.0f", dims[0], dims[1], dims[2], dims[3])
	assert.LessOrEqual(t, dims[0], 390.0, "the page is no wider than the phone")
	assert.Greater(t, dims[1], dims[2], "the drawing scrolls in its own box")
	assert.LessOrEqual(t, dims[3], 390.0, "the box fits the phone")
}
