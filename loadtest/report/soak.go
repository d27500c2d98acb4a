package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/stockguard/stockguard/loadtest/soak"
)

// writeSoak prints the soak's lines (-soak) and its verdict: LEAK with the series, or none.
func (r *Report) writeSoak(w io.Writer) {
	if r.Soak == nil {
		return
	}
	fmt.Fprintln(w)
	for _, l := range r.Soak.Lines() {
		fmt.Fprintln(w, l)
	}
	if len(r.Leaked) > 0 {
		fmt.Fprintf(w, "soak verdict: LEAK (%s)\n", strings.Join(r.Leaked, ", "))
		return
	}
	if !r.Soak.Judged() {
		fmt.Fprintln(w, "soak verdict: nothing judged (no series was long enough: a longer -duration, or a shorter -soak-every)")
		return
	}
	fmt.Fprintln(w, "soak verdict: no leak (no series grew past its bound)")
}

// soakPlots draws every metric's series of the soak (soak.Result.WriteSVG), one small chart a
// metric, with the reason of its bound beneath.
func soakPlots(res *soak.Result) template.HTML {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, m := range res.Metrics {
		b.WriteString(`<figure class="soak">`)
		if err := res.WriteSVG(&b, m.Name); err != nil {
			return template.HTML(template.HTMLEscapeString(err.Error()))
		}
		fmt.Fprintf(&b, `<figcaption>%s: bound %s</figcaption></figure>`, template.HTMLEscapeString(m.Name), template.HTMLEscapeString(res.Bounds[m.Name]))
	}
	return template.HTML(b.String()) // WriteSVG escapes every name it writes
}
