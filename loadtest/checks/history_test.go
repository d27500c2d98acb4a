package checks

import (
	"testing"

	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stretchr/testify/assert"
)

// TestVizPathsDifferPerRun: the two runs of one strategy under -chaos latency (without and
// with the latency) write their visualizations under different names.
func TestVizPathsDifferPerRun(t *testing.T) {
	cfg := config.Config{HTMLFile: "/tmp/r.html"}
	// The labels of the two rows (report.StrategyResult.Label: the strategy, then the fault).
	a, b := VizPath(cfg, "lock+guard")(7), VizPath(cfg, "lock+guard +20ms")(7)
	assert.NotEqual(t, a, b)
	assert.Equal(t, "/tmp/r-history-lock_guard-item-7.html", a)
	assert.Equal(t, "/tmp/r-history-lock_guard__20ms-item-7.html", b)
}
