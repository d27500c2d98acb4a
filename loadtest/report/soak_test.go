package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/soak"
)

// soakResult judges two series of goroutines, a flat one and one that grows by 10 a second.
func soakResult() *soak.Result {
	res := &soak.Result{Every: 1, Warmup: 2, Probes: 40, Series: map[string]map[string][]soak.Point{"goroutines": {}},
		Bounds: map[string]string{"goroutines": soak.Goroutines.Why}, Metrics: []soak.Metric{soak.Goroutines}}
	for _, name := range []string{"i0@1", "i1@1"} {
		var pts []soak.Point
		for i := range 20 {
			v := 50.0
			if name == "i1@1" {
				v += 10 * float64(i)
			}
			pts = append(pts, soak.Point{At: float64(i), Value: v})
		}
		res.Series["goroutines"][name] = pts
		res.Fits = append(res.Fits, soak.Judge(soak.Goroutines, name, pts, 2e9))
	}
	return res
}

// TestSoakInTheReports: the table prints the soak's lines and its verdict, the HTML page
// plots every metric's series and says the verdict in words.
func TestSoakInTheReports(t *testing.T) {
	r := &Report{Config: ReportConfig{Workload: "purchase,cart,holds"}, Soak: soakResult(), Leaked: []string{"goroutines of i1@1"}, ExitCode: ExitLeak}
	require.Len(t, r.Soak.Leaks(), 1)
	var out bytes.Buffer
	r.WriteTable(&out)
	assert.Contains(t, out.String(), "0s of each workload (purchase,cart,holds) per strategy")
	assert.Contains(t, out.String(), "LEAK goroutines of i1@1")
	assert.Contains(t, out.String(), "soak verdict: LEAK (goroutines of i1@1)")
	path := filepath.Join(t.TempDir(), "r.html")
	require.NoError(t, r.WriteHTML(path))
	page, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(page), `<svg class="soak"`))
	assert.Contains(t, string(page), "i1@1 LEAK</text>")
	assert.Contains(t, string(page), "soak verdict: LEAK (goroutines of i1@1)")

	r.Leaked, r.ExitCode = nil, 0
	out.Reset()
	r.WriteTable(&out)
	assert.Contains(t, out.String(), "soak verdict: no leak")
}
