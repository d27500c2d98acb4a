package report

import (
	"fmt"
	"html"
	"html/template"
	"strings"

	"github.com/stockguard/stockguard/loadtest/fault"
)

// mixColors colour the fault kinds on the HTML report's strip, in the order of fault.MixKinds.
var mixColors = []string{"#8250df", "#cf222e", "#bf8700", "#9a6700", "#0969da", "#1a7f37", "#bc4c00", "#57606a"}

// mixStrip draws the faults of a -chaos mix run as an SVG strip, one row per kind, each fault
// a bar from its start to its undoing over the run's duration (seconds), its timeline line as
// the bar's tooltip; a fault cut short or not brought is drawn hollow. Empty when the event has
// no schedule.
func mixStrip(ev *fault.Event, duration float64) template.HTML {
	if ev == nil || ev.Mix == nil {
		return ""
	}
	s := ev.Mix
	end := duration
	for _, f := range s.Faults {
		end = max(end, f.End)
	}
	if end <= 0 {
		end = 1
	}
	const left, width, row = 230.0, 1000.0, 16.0
	height := row*float64(len(s.Kinds)) + 18
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="strip" viewBox="0 0 %.0f %.0f" role="img" aria-label="fault schedule">`, width, height)
	x := func(t float64) float64 { return left + (width-left-4)*t/end }
	for i, kind := range s.Kinds {
		y := row * float64(i)
		color := mixColors[i%len(mixColors)]
		for k, known := range fault.MixKinds() {
			if known == kind {
				color = mixColors[k%len(mixColors)]
			}
		}
		label := fmt.Sprintf("%s ×%d", kind, s.Fired[kind])
		if n := s.Failed[kind]; n > 0 {
			label += fmt.Sprintf(" (%d failed)", n)
		}
		weight := ""
		if s.Fired[kind] == 0 {
			label += " MISSED"
			weight = ` font-weight="600" fill="#cf222e"`
		}
		fmt.Fprintf(&b, `<text x="0" y="%.0f" font-size="11"%s>%s</text>`, y+12, weight, html.EscapeString(label))
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#d0d7de"/>`, left, y+8, width-4, y+8)
		for _, f := range s.Faults {
			if f.Kind != kind || f.At <= 0 {
				continue
			}
			w := max(x(f.End)-x(f.At), 2)
			fill := color
			if f.Outcome != "fired" {
				fill = "none"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s" stroke="%s"><title>%.2fs–%.2fs %s (%s)</title></rect>`,
				x(f.At), y+2, w, row-4, fill, color, f.At, f.End, html.EscapeString(f.What), html.EscapeString(f.Outcome))
		}
	}
	axis := row * float64(len(s.Kinds))
	for t := 0.0; t <= end; t += tickStep(end) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10" fill="#57606a" text-anchor="middle">%gs</text>`, x(t), axis+14, t)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}

// tickStep is the spacing of the strip's time labels: about ten over the run.
func tickStep(end float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 20, 30, 60, 120, 300} {
		if end/s <= 12 {
			return s
		}
	}
	return 600
}
