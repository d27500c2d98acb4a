package soak

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Lines are the soak's lines of the text report: one a metric, with its worst series, then
// every LEAK with its figures.
func (res *Result) Lines() []string {
	if res == nil {
		return nil
	}
	out := []string{fmt.Sprintf("soak: %d probe(s) every %gs, %d unanswered (paused or restarting targets); fit after a %gs warm-up (Theil–Sen)",
		res.Probes, res.Every, res.Misses, res.Warmup)}
	for _, m := range res.Metrics {
		var judged, short int
		worst := Fit{Growth: math.Inf(-1)}
		for _, f := range res.Fits {
			if f.Metric != m.Name {
				continue
			}
			if f.Short != "" {
				short++
				continue
			}
			judged++
			// The worst is a leaking series first (a steeper spike that fell back is not a
			// leak), else the steepest.
			if (f.Leak && !worst.Leak) || (f.Leak == worst.Leak && f.Growth-f.Bound > worst.Growth-worst.Bound) {
				worst = f
			}
		}
		if judged == 0 {
			out = append(out, fmt.Sprintf("  %-15s %d series, none long enough to judge", m.Name, short))
			continue
		}
		verdict, which := "ok", "steepest"
		if worst.Leak {
			verdict, which = "LEAK", "leaking"
		}
		out = append(out, fmt.Sprintf("  %-15s %-4s %d series judged; "+which+" %s: %s/min over %.0fs (growth %s, bound %s)",
			m.Name, verdict, judged, worst.Series, amount(worst.Slope*60, m.Unit), worst.Window, amount(worst.Growth, m.Unit), amount(worst.Bound, m.Unit)))
	}
	for _, f := range res.Leaks() {
		out = append(out, fmt.Sprintf("  LEAK %s of %s: grew %s in %.0fs (median of the last quarter %s above the first), bound %s",
			f.Metric, f.Series, amount(f.Growth, f.Unit), f.Window, amount(f.Shift, f.Unit), amount(f.Bound, f.Unit)))
	}
	return out
}

func amount(v float64, unit string) string {
	if unit == "bytes" {
		return fmt.Sprintf("%+.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%+.1f", v)
}

// WriteSVG draws one metric's series as lines on a time axis, a small inline SVG for the HTML
// report; each series is labelled in words beside its last point (colour is never the only cue).
func (res *Result) WriteSVG(w io.Writer, metric string) error {
	series := res.Series[metric]
	if len(series) == 0 {
		return nil
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range series {
			if !yield(k) {
				return
			}
		}
	})
	const W, H, left, right, top, bottom = 440.0, 140.0, 44.0, 176.0, 10.0, 20.0
	var tmax, vmin, vmax = 0.0, math.Inf(1), math.Inf(-1)
	unit := ""
	for _, m := range res.Metrics {
		if m.Name == metric {
			unit = m.Unit
		}
	}
	scale := 1.0
	if unit == "bytes" {
		scale = 1 << 20
	}
	for _, pts := range series {
		for _, p := range pts {
			tmax = math.Max(tmax, p.At)
			vmin = math.Min(vmin, p.Value/scale)
			vmax = math.Max(vmax, p.Value/scale)
		}
	}
	if vmax == vmin {
		vmax = vmin + 1
	}
	if tmax == 0 {
		tmax = 1
	}
	x := func(t float64) float64 { return left + (W-left-right)*t/tmax }
	y := func(v float64) float64 { return top + (H-top-bottom)*(1-(v/scale-vmin)/(vmax-vmin)) }
	label := metric
	if unit == "bytes" {
		label += " (MiB)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="soak" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s over the soak, one line a series">`, W, H, html.EscapeString(label))
	fmt.Fprintf(&b, `<text x="0" y="%.0f" font-size="9">%.4g</text><text x="0" y="%.0f" font-size="9">%.4g</text>`, top+8, vmax, H-bottom, vmin)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="9">0 s</text><text x="%.0f" y="%.0f" font-size="9" text-anchor="end">%.0f s</text>`, left, H-4, W-right, H-4, tmax)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`, left, H-bottom, W-right, H-bottom)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="10" font-weight="bold">%s</text>`, left, top, html.EscapeString(label))
	if res.Warmup < tmax {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#bbb" stroke-dasharray="3 3"><title>end of the warm-up</title></line>`,
			x(res.Warmup), top, x(res.Warmup), H-bottom)
	}
	palette := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	for i, name := range names {
		pts := series[name]
		col := palette[i%len(palette)]
		var path strings.Builder
		for j, p := range pts {
			op := "L"
			if j == 0 {
				op = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f", op, x(p.At), y(p.Value))
		}
		leak := ""
		for _, f := range res.Fits {
			if f.Metric == metric && f.Series == name && f.Leak {
				leak = " LEAK"
			}
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.2"/>`, path.String(), col)
		last := pts[len(pts)-1]
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" fill="%s">%s%s</text>`, W-right+4, y(last.Value)+3, col, html.EscapeString(name), leak)
	}
	b.WriteString(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
}
