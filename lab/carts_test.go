//go:build !nodemo

package lab_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
)

// cartRun posts one lab cart run and decodes the answer.
func cartRun(t *testing.T, e *env, body string) map[string]any {
	t.Helper()
	a := e.do("POST", "/api/lab/carts", body)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var res map[string]any
	decode(t, a, &res)
	return res
}

// The two cart pitfalls, each next to its fix, every run: carts {A,B} and {B,A} that lock
// in request order each hold one lock and wait for the other's until the lock wait ends
// (BLOCKED, nothing sold, both refused lock_timeout), where lock+guard's canonical order sells
// both; a cart of two lines of one item checked one line at a time sells twice the stock
// (OVERSOLD), where guard's merged lines refuse it (SAFE).
func TestLabCartPitfalls(t *testing.T) {
	const lockWait = time.Second
	e := newEnv(t, envOptions{lease: 500 * time.Millisecond, lockWait: lockWait})
	ids := resetLab(t, e)
	for run := range 3 { // every run, not once
		start := time.Now()
		res := cartRun(t, e, `{"case":"cart-order","strategy":"request-order","items":[`+ids[0]+`,`+ids[1]+`],"work_ms":0}`)
		assert.Equal(t, "BLOCKED", res["verdict"], "run %d: %v", run, res)
		assert.EqualValues(t, 0, res["sold"], "run %d: %v", run, res)
		assert.Equal(t, map[string]any{"lock_timeout": 2.0}, res["answers"], "run %d", run)
		assert.Contains(t, res["note"], "waited for the other's")
		assert.GreaterOrEqual(t, time.Since(start), lockWait, "run %d: the deadlock ends only at the lock wait", run)
	}
	res := cartRun(t, e, `{"case":"cart-order","strategy":"lock+guard","items":[`+ids[0]+`,`+ids[1]+`],"work_ms":200}`)
	assert.Equal(t, "SAFE", res["verdict"], "%v", res)
	assert.EqualValues(t, 4, res["sold"], "two carts of two units: %v", res)
	assert.Equal(t, map[string]any{"created": 2.0}, res["answers"])

	res = cartRun(t, e, `{"case":"cart-lines","strategy":"guard","items":[`+ids[2]+`],"work_ms":0}`)
	assert.Equal(t, "SAFE", res["verdict"], "%v", res)
	assert.EqualValues(t, 0, res["sold"], "%v", res)
	assert.Equal(t, map[string]any{"insufficient_stock": 1.0}, res["answers"])
	res = cartRun(t, e, `{"case":"cart-lines","strategy":"line-by-line","items":[`+ids[2]+`],"work_ms":0}`)
	assert.Equal(t, "OVERSOLD", res["verdict"], "%v", res)
	assert.EqualValues(t, 20, res["sold"], "two lines of the whole stock, 10 each: %v", res)
	assert.EqualValues(t, 20, res["oversold"], "10 sold beyond the stock, 10 below zero: %v", res)
	a := e.do("POST", "/api/lab/carts", `{"case":"cart-lines","strategy":"line-by-line","items":[`+ids[2]+`],"work_ms":0}`)
	assert.Equal(t, "sold_out", a.errorCode(), "no stock left to show the pitfall: %s", a.body)

	for _, body := range []string{
		`{"case":"cart-order","strategy":"line-by-line","items":[1,2],"work_ms":0}`,
		`{"case":"cart-order","strategy":"request-order","items":[1,1],"work_ms":0}`,
		`{"case":"cart-order","strategy":"request-order","items":[1],"work_ms":0}`,
		`{"case":"cart-lines","strategy":"guard","items":[0],"work_ms":0}`,
		`{"case":"cart-lines","strategy":"guard","items":[1],"work_ms":-1}`,
		`{"case":"carts","strategy":"guard","items":[1],"work_ms":0}`,
	} {
		a := e.do("POST", "/api/lab/carts", body)
		assert.Equal(t, "invalid_request", a.errorCode(), "%s: %s", body, a.body)
	}
}

// POST /api/lab/checkout sells the demo cart strategies only, and takes the barrier fault
// (request-order only, with a barrier name); one cart alone at a barrier goes on after one
// lock wait.
func TestLabCheckout(t *testing.T) {
	e := newEnv(t, envOptions{lease: 500 * time.Millisecond, lockWait: 300 * time.Millisecond})
	ids := resetLab(t, e)
	cart := `{"lines":[{"item_id":` + ids[1] + `,"quantity":2},{"item_id":` + ids[0] + `,"quantity":1}]}`
	a := e.do("POST", "/api/lab/checkout", cart, "X-Strategy: request-order")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	var rec inventory.CartReceipt
	decode(t, a, &rec)
	assert.Equal(t, inventory.StrategyRequestOrder, rec.Strategy)
	require.Len(t, rec.Lines, 2)
	assert.Positive(t, rec.Lines[0].FenceToken, "fenced by its item's lock")

	start := time.Now()
	a = e.do("POST", "/api/lab/checkout", cart, "X-Strategy: request-order", "X-Fault: barrier", "X-Barrier: alone")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	assert.GreaterOrEqual(t, time.Since(start), 2*300*time.Millisecond, "two meetings nobody else came to, one lock wait each")

	a = e.do("POST", "/api/lab/checkout", `{"lines":[{"item_id":`+ids[2]+`,"quantity":6},{"item_id":`+ids[2]+`,"quantity":6}]}`, "X-Strategy: line-by-line")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	decode(t, a, &rec)
	assert.Equal(t, []inventory.LineReceipt{{ItemID: rec.Lines[0].ItemID, Quantity: 12, Remaining: -2}}, rec.Lines)
	a = e.do("POST", "/api/lab/checkout", `{"lines":[{"item_id":`+ids[2]+`,"quantity":1}]}`, "X-Strategy: line-by-line")
	assert.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	assert.Contains(t, string(a.body), `"lines":[{"item_id":`+ids[2]+`,"requested":1,"available":0}]`)

	for _, c := range []struct{ name, body string }{
		{"a real cart strategy", "X-Strategy: lock+guard"},
		{"no strategy", "X-Simulated-Work: 0s"},
		{"the barrier on line-by-line", "X-Strategy: line-by-line|X-Fault: barrier|X-Barrier: b"},
		{"a barrier without a name", "X-Strategy: request-order|X-Fault: barrier"},
		{"another fault", "X-Strategy: request-order|X-Fault: stall"},
		{"bad work", "X-Strategy: request-order|X-Simulated-Work: soon"},
	} {
		a := e.do("POST", "/api/lab/checkout", cart, splitHeaders(c.body)...)
		assert.Equal(t, "invalid_request", a.errorCode(), "%s: %s", c.name, a.body)
	}
}

func splitHeaders(s string) []string {
	var out []string
	for h := range strings.SplitSeq(s, "|") {
		out = append(out, h)
	}
	return out
}
