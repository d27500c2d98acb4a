package report

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/loadtest/checks"
)

// A history's reason is shown when no item line shows it: what a linearizable verdict left
// out (the holds workload's items that holds touch) is said next to it, not only in the JSON.
func TestHistoryNote(t *testing.T) {
	partial := &checks.HistoryResult{Verdict: checks.Linearizable, Reason: "items [1 2] left out",
		Items: []checks.HistoryItem{{ItemID: 3, Result: "ok", Checked: 10}}}
	assert.Equal(t, "items [1 2] left out", historyNote(partial))
	illegal := &checks.HistoryResult{Verdict: checks.NotLinearizable, Reason: "item 3: no order",
		Items: []checks.HistoryItem{{ItemID: 3, Result: "illegal", Reason: "no order"}}}
	assert.Empty(t, historyNote(illegal), "the item's line shows it")
}
