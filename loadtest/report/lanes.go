package report

import (
	"fmt"
	"html"
	"html/template"
	"strings"

	"github.com/stockguard/stockguard/loadtest/fault"
)

// The lanes' drawing: pixels per second of the axis (the lab draws 90 at least; a pause run's
// window is a few seconds of short holds), the height of a row and of the axis.
const (
	lanePPS   = 300.0
	laneRow   = 40.0
	laneAxis  = 18.0
	laneBar   = 14.0
	laneMinW  = 320.0
	laneRight = 60.0 // room for the last label
)

// The lanes' colours, each paired with its word in the legend and in every tooltip.
const (
	colHolding = "#0969da" // holding the lock
	colLate    = "#cf222e" // still working, lock gone (hatched)
	colPause   = "#8c959f" // SIGSTOP
	colOK      = "#1a7f37" // write accepted
	colLateW   = "#bc4c00" // write accepted late
	colOverlap = "#bf8700" // two holders
)

// laneStrip draws a -chaos pause run's hot item lock (fault.Lanes) as the lab's timeline
// does: one row per instance (its name in a fixed column), each hold a bar labelled with its
// token, hatched past its lease's end, the SIGSTOP a grey span, each write a diamond in the
// colour of its outcome, the overlaps outlined; the axis scrolls in its own box. The words under
// it say the same for a reader who cannot see it (the SVG is aria-hidden). Empty without lanes.
func laneStrip(ev *fault.Event) template.HTML {
	if ev == nil || ev.Lanes == nil || len(ev.Lanes.Rows) == 0 {
		return ""
	}
	l := ev.Lanes
	span := max(l.To-l.From, 0.1)
	width := max(laneMinW, span*lanePPS+laneRight)
	height := laneAxis + laneRow*float64(len(l.Rows))
	x := func(t float64) float64 { return 4 + (min(max(t, l.From), l.To)-l.From)*lanePPS }
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="lanes" data-item="%d"><figcaption>The hot item %d's lock, +%.2f s to +%.2f s of the run, one row per instance:</figcaption>`,
		l.Item, l.Item, l.From, l.To)
	b.WriteString(`<div class="lanes-box"><div class="lanes-names" aria-hidden="true">`)
	fmt.Fprintf(&b, `<div style="height:%.0fpx"></div>`, laneAxis)
	for _, r := range l.Rows {
		fmt.Fprintf(&b, `<div style="height:%.0fpx" title="pid %d">i%d</div>`, laneRow, r.PID, r.Instance)
	}
	b.WriteString(`</div><div class="lanes-scroll">`)
	fmt.Fprintf(&b, `<svg class="lanes-svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" aria-hidden="true">`, width, height, width, height)
	fmt.Fprintf(&b, `<defs><pattern id="lanes-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffebe9"/><line x1="0" y1="0" x2="0" y2="6" stroke="%s" stroke-width="3"/></pattern></defs>`, colLate)
	laneAxisTicks(&b, l, x)
	for i, r := range l.Rows {
		y := laneAxis + laneRow*float64(i)
		fmt.Fprintf(&b, `<line x1="0" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#d0d7de"/>`, y+laneRow-0.5, width, y+laneRow-0.5)
		if p := l.Pause; p != nil && p.Instance == r.Instance {
			fmt.Fprintf(&b, `<rect class="pause" data-instance="%d" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s" fill-opacity="0.35"><title>SIGSTOP: instance %d stopped from +%.2f s to +%.2f s</title></rect>`,
				r.Instance, x(p.From), y+1, max(x(p.To)-x(p.From), 1), laneRow-2, colPause, r.Instance, p.From, p.To)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#424a53" text-anchor="end">SIGSTOP</text>`, x(p.To)-2, y+laneRow-4)
		}
		for _, o := range l.Overlaps {
			if o.Late == r.Instance || o.Holder == r.Instance {
				fmt.Fprintf(&b, `<rect class="overlap" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="4 2"/>`,
					x(o.From), y+laneBar/2-2, max(x(o.To)-x(o.From), 1), laneBar+4, colOverlap)
			}
		}
		for _, h := range r.Holds {
			laneHold(&b, r.Instance, h, y+laneBar/2, x, l)
		}
	}
	b.WriteString(`</svg></div></div>`)
	laneLegend(&b)
	laneWords(&b, ev)
	b.WriteString(`</figure>`)
	return template.HTML(b.String()) // every text in it is escaped or a number
}

// laneAxisTicks draws the time labels, every quarter second or wider.
func laneAxisTicks(b *strings.Builder, l *fault.Lanes, x func(float64) float64) {
	step := 0.25
	for (l.To-l.From)/step > 16 {
		step *= 2
	}
	first := float64(int(l.From/step)+1) * step
	for t := first; t <= l.To; t += step {
		fmt.Fprintf(b, `<text x="%.1f" y="12" font-size="10" fill="#57606a" text-anchor="middle">+%.2fs</text><line x1="%.1f" y1="14" x2="%.1f" y2="%.0f" stroke="#eaeef2"/>`,
			x(t), t, x(t), x(t), laneAxis+laneRow*float64(len(l.Rows)))
	}
}

// laneHold draws one hold at row height y: the bar to its lease's end, hatched past it, the
// lease end, renewals, the loss and the writes.
func laneHold(b *strings.Builder, instance int, h fault.LaneHold, y float64, x func(float64) float64, l *fault.Lanes) {
	leaseEnd := h.LeaseEnd
	if leaseEnd < 0 || leaseEnd > h.To {
		leaseEnd = h.To
	}
	what := fmt.Sprintf("instance %d holds the lock with token %d from +%.3f s to +%.3f s", instance, h.Token, h.From, h.To)
	if h.Before {
		what += " (acquired before the recording)"
	}
	if h.LeaseEnd >= 0 {
		what += fmt.Sprintf("; its lease ended at +%.3f s", h.LeaseEnd)
	}
	fmt.Fprintf(b, `<rect class="hold" data-instance="%d" data-token="%d" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s"><title>%s</title></rect>`,
		instance, h.Token, x(h.From), y, max(x(leaseEnd)-x(h.From), 1), laneBar, colHolding, html.EscapeString(what))
	if h.To > leaseEnd {
		fmt.Fprintf(b, `<rect class="hold-late" data-instance="%d" data-token="%d" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="url(#lanes-hatch)" stroke="%s"><title>still working, lock gone: token %d from +%.3f s to +%.3f s</title></rect>`,
			instance, h.Token, x(leaseEnd), y, max(x(h.To)-x(leaseEnd), 1), laneBar, colLate, h.Token, leaseEnd, h.To)
	}
	if h.To > h.LeaseEnd && h.LeaseEnd >= l.From && h.LeaseEnd <= l.To { // only a lease its hold outlived
		fmt.Fprintf(b, `<line class="lease-end" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`, x(h.LeaseEnd), y-4, x(h.LeaseEnd), y+laneBar+4, colLate)
	}
	for _, t := range h.Renewals {
		fmt.Fprintf(b, `<line class="renew" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#0550ae"/>`, x(t), y-4, x(t), y)
	}
	if h.Lost > 0 {
		fmt.Fprintf(b, `<text class="lost" x="%.1f" y="%.1f" font-size="12" fill="%s" text-anchor="middle">×<title>token %d learned of the loss at +%.3f s</title></text>`,
			x(h.Lost), y-2, colLate, h.Token, h.Lost)
	}
	if w := x(h.To) - x(h.From); w >= 30 || h.Token == pausedToken(l, instance) {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="#1f2328">token %d</text>`, x(h.From)+1, y+laneBar+11, h.Token)
	}
	for _, wr := range h.Writes {
		color, cls := colOK, "accepted"
		switch wr.Outcome {
		case fault.WriteLate:
			color, cls = colLateW, "late"
		case fault.WriteRefused:
			color, cls = colLate, "refused"
		}
		cx, cy := x(wr.At), y+laneBar/2
		label := fmt.Sprintf("write with token %d at +%.3f s: %s", h.Token, wr.At, wr.Outcome)
		if wr.Seen > 0 {
			label += fmt.Sprintf(" (the database had seen token %d)", wr.Seen)
		}
		fmt.Fprintf(b, `<path class="write %s" data-instance="%d" data-token="%d" d="M%.1f %.1fl5 5l-5 5l-5 -5z" fill="%s" stroke="#fff"><title>%s</title></path>`,
			cls, instance, h.Token, cx, cy-5, color, html.EscapeString(label))
		if wr.Outcome != fault.WriteAccepted {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" font-weight="600" fill="%s">%s</text>`, cx+6, y-3, color, html.EscapeString(wr.Outcome))
		}
	}
}

// pausedToken is the token of the paused hold when instance was paused, else 0.
func pausedToken(l *fault.Lanes, instance int) int64 {
	if l.Pause == nil || l.Pause.Instance != instance {
		return 0
	}
	for _, r := range l.Rows {
		if r.Instance != instance {
			continue
		}
		for _, h := range r.Holds {
			if h.From <= l.Pause.From && h.To >= l.Pause.From {
				return h.Token
			}
		}
	}
	return 0
}

// laneLegend pairs every colour with its word.
func laneLegend(b *strings.Builder) {
	sw := func(color, style, word string) {
		fmt.Fprintf(b, `<span class="key"><i style="background:%s%s"></i>%s</span>`, color, style, word)
	}
	b.WriteString(`<p class="legend">`)
	sw(colHolding, "", "holding the lock")
	sw(colLate, ";background-image:repeating-linear-gradient(45deg,#ffebe9 0 3px,transparent 3px 6px)", "still working, lock gone (past the lease's end, a red line)")
	sw(colPause, "", "SIGSTOP")
	sw(colOK, "", "write accepted")
	sw(colLateW, "", "write accepted late")
	sw(colLate, "", "write refused by the fence")
	sw(colOverlap, "", "two holders (dashed outline)")
	b.WriteString(`</p>`)
}

// laneWords says what the drawing shows: the pause, the overlaps, the writes not accepted in
// their lease, the notes, and how the clocks are put on one axis.
func laneWords(b *strings.Builder, ev *fault.Event) {
	l := ev.Lanes
	var lines []string
	if p := l.Pause; p != nil {
		s := fmt.Sprintf("i%d stopped (SIGSTOP) from +%.2f s to +%.2f s", p.Instance, p.From, p.To)
		if ev.Token > 0 {
			s += fmt.Sprintf(", holding token %d", ev.Token)
		}
		lines = append(lines, s)
	}
	const most = 5
	for i, o := range l.Overlaps {
		if i == most {
			lines = append(lines, fmt.Sprintf("and %d more overlaps", len(l.Overlaps)-most))
			break
		}
		tokens := fmt.Sprintf("token %d", o.HolderToken)
		if o.Holds > 1 {
			tokens = fmt.Sprintf("tokens %d to %d, %d holds", o.HolderToken, o.LastToken, o.Holds)
		}
		lines = append(lines, fmt.Sprintf("i%d still working (token %d), i%d holding item %d (%s), for %.2f s between +%.2f s and +%.2f s",
			o.Late, o.LateToken, o.Holder, l.Item, tokens, o.For, o.From, o.To))
	}
	marks := groupMarks(l.Marks())
	for i, m := range marks {
		if i == most {
			lines = append(lines, fmt.Sprintf("and %d more writes not accepted in their lease", len(marks)-most))
			break
		}
		s := fmt.Sprintf("i%d's write with token %d at +%.2f s: %s", m.Instance, m.Token, m.At, m.Outcome)
		if m.n > 1 {
			s = fmt.Sprintf("i%d's %d writes with token %d (one hold's buyers) at +%.2f s to +%.2f s: %s", m.Instance, m.n, m.Token, m.At, m.last, m.Outcome)
		}
		if m.Outcome == fault.WriteRefused {
			s += " by the fence"
			if m.Seen > 0 {
				s += fmt.Sprintf(" (the database had seen token %d)", m.Seen)
			}
		} else {
			s += " (after its lease's end: nothing refused it)"
		}
		lines = append(lines, s)
	}
	if len(l.Overlaps) == 0 && len(marks) == 0 {
		lines = append(lines, "no holder worked past its lease while another held the item, and every write came within its lease")
	}
	if l.Missed > 0 {
		lines = append(lines, fmt.Sprintf("the event streams missed %d events (a subscriber 256 events behind): some bars may be missing", l.Missed))
	}
	lines = append(lines, l.Notes...)
	b.WriteString(`<ul class="lanes-words">`)
	for _, s := range lines {
		fmt.Fprintf(b, `<li>%s</li>`, html.EscapeString(s))
	}
	b.WriteString(`</ul>`)
	fmt.Fprintf(b, `<p class="lanes-clock">One clock: %s</p>`, html.EscapeString(l.Clock))
}

// markGroup is the writes of one hold with one outcome, in a row: a coalesced hold writes for
// each of its buyers.
type markGroup struct {
	fault.LaneMark
	n    int
	last float64
}

// groupMarks merges the consecutive marks of one instance, token and outcome.
func groupMarks(marks []fault.LaneMark) []markGroup {
	var out []markGroup
	for _, m := range marks {
		if n := len(out); n > 0 && out[n-1].Instance == m.Instance && out[n-1].Token == m.Token && out[n-1].Outcome == m.Outcome {
			out[n-1].n++
			out[n-1].last = m.At
			out[n-1].Seen = max(out[n-1].Seen, m.Seen)
			continue
		}
		out = append(out, markGroup{LaneMark: m, n: 1, last: m.At})
	}
	return out
}

// laneSummary says in one line of the text report what the lanes of a pause show: the events
// recorded, the longest overlap, and the paused holder's writes not accepted in their lease
// ("" without lanes; the HTML report draws them).
func laneSummary(ev *fault.Event) string {
	if ev == nil || ev.Lanes == nil {
		return ""
	}
	l := ev.Lanes
	s := fmt.Sprintf("%d events of item %d's lock from the instances' streams", l.Events, l.Item)
	var longest *fault.Overlap
	for i := range l.Overlaps {
		if longest == nil || l.Overlaps[i].For > longest.For {
			longest = &l.Overlaps[i]
		}
	}
	if longest != nil {
		s += fmt.Sprintf("; i%d still working (token %d) while i%d held the item for %.2f s", longest.Late, longest.LateToken, longest.Holder, longest.For)
	}
	counts := map[string]int{}
	for _, m := range l.Marks() {
		if m.Token == ev.Token && m.Instance == ev.Instance {
			counts[m.Outcome]++
		}
	}
	for _, o := range []string{fault.WriteRefused, fault.WriteLate} {
		if counts[o] > 0 {
			s += fmt.Sprintf("; %d write(s) of token %d %s", counts[o], ev.Token, o)
		}
	}
	if l.Missed > 0 {
		s += fmt.Sprintf("; %d events missed", l.Missed)
	}
	return s + " (the HTML report draws them)"
}
