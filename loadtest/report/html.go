package report

import (
	_ "embed"
	"encoding/json"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
)

// chartJS is Chart.js 4.6.1 (MIT, see assets/chart.js-LICENSE.md), inlined into the HTML report
// so that it works offline.
//
//go:embed assets/chart.umd.min.js
var chartJS string

//go:embed report.html.tmpl
var reportHTML string

var sourceMapRE = regexp.MustCompile(`(?m)^//# sourceMappingURL=.*$`)

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    fmtMS,
	"codes": codes,
	"work":  fmtWork,
	"batch": fmtBatch,
	"base":  filepath.Base,
	// historyNote is a history's reason when no item line carries it (history.go).
	"historyNote": historyNote,
	// mixStrip draws a -chaos mix run's faults (timeline.go).
	"mixStrip": mixStrip,
	// laneStrip draws a -chaos pause run's hot item lock, per instance (lanes.go).
	"laneStrip": laneStrip,
	// soakPlots draws the -soak series (soak.go).
	"soakPlots": soakPlots,
}).Parse(reportHTML))

// WriteHTML writes r as a self-contained HTML page with its charts.
func (r *Report) WriteHTML(path string) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = reportTmpl.Execute(f, map[string]any{
		"R":           r,
		"Carts":       r.cartRows(),
		"LockClasses": cartClassLabels(),
		"ChartJS":     template.JS(sourceMapRE.ReplaceAllString(chartJS, "")),
		"Data":        template.JS(data), // JSON is a JavaScript expression
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
