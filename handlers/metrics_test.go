package handlers_test

import (
	"errors"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

func TestMetrics(t *testing.T) {
	e := newEnv(t, envOptions{demo: true})
	require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":2}`, "Idempotency-Key: m1").status)
	require.Equal(t, http.StatusOK, e.do("POST", "/api/items/1/purchase", `{"quantity":2}`, "Idempotency-Key: m1").status)
	require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Strategy: naive").status)
	require.Equal(t, http.StatusConflict, e.do("POST", "/api/items/3/purchase", `{"quantity":2}`).status)
	require.Equal(t, http.StatusBadRequest, e.do("POST", "/api/items/1/purchase", `{"quantity":0}`, "X-Strategy: made-up").status)

	e.metrics.LockAcquired("item:1", 7, 20*time.Millisecond)
	e.metrics.LockRenewed("item:1")
	e.metrics.LockLost("item:1", errors.New("lost"))

	a := e.do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, a.status)
	body := string(a.body)
	for _, line := range []string{
		`stockguard_purchases_total{result="created",strategy="guard"} 1`,
		`stockguard_purchases_total{result="replayed",strategy="guard"} 1`,
		`stockguard_purchases_total{result="created",strategy="naive"} 1`,
		`stockguard_purchases_total{result="insufficient_stock",strategy="guard"} 1`,
		// An unknown X-Strategy is not a label value (no unbounded cardinality).
		`stockguard_purchases_total{result="invalid_request",strategy="guard"} 1`,
		// The service timed four answers: the invalid quantity is refused by the service too
		// (it is the authority on quantities; handlers check only the JSON syntax).
		`stockguard_purchase_duration_seconds_count{strategy="guard"} 4`,
		`stockguard_lock_wait_seconds_count 1`,
		`stockguard_lock_renewals_total 1`,
		`stockguard_lock_losses_total 1`,
		`stockguard_item_stock{item_id="1",sku="T-1"} 7`,
		`stockguard_item_stock{item_id="3",sku="T-3"} 1`,
		`go_goroutines`,
	} {
		assert.Contains(t, body, line)
	}
}

// When the stock gauge cannot read the catalogue (the database down), /metrics still answers
// 200 with every other metric, the stock gauge left out.
func TestMetricsWhileTheCatalogueFails(t *testing.T) {
	e := newEnv(t, envOptions{demo: true})
	e.wrap.listFails.Store(true)
	a := e.do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Contains(t, string(a.body), "go_goroutines")
	assert.Contains(t, string(a.body), "stockguard_lock_renewals_total")
	assert.NotContains(t, string(a.body), "stockguard_item_stock{")
	e.wrap.listFails.Store(false)
	assert.Contains(t, string(e.do("GET", "/metrics", "").body), `stockguard_item_stock{item_id="1"`)
}

func TestMetricsGatherWithoutService(t *testing.T) {
	reg := prometheus.NewRegistry()
	handlers.NewMetrics(reg) // no service yet: the stock gauge reports nothing
	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	assert.Contains(t, names, "stockguard_lock_renewals_total")
	assert.NotContains(t, names, "stockguard_item_stock")
}

func TestDebugLocks(t *testing.T) {
	e := newEnv(t, envOptions{demo: true})
	var body struct {
		PID   int                  `json:"pid"`
		Locks []inventory.HeldLock `json:"locks"`
	}
	decode(t, e.do("GET", "/api/debug/locks", ""), &body)
	assert.Equal(t, os.Getpid(), body.PID)
	assert.Empty(t, body.Locks)
	assert.NotNil(t, body.Locks, "an empty list, not null")

	h := e.locks.Hooks(lockKeyPrefix)
	h.Acquired("item:2", 9, 0)
	h.Acquired("item:1", 5, 0)
	a := e.do("GET", "/api/debug/locks", "")
	assert.JSONEq(t, `{"pid":`+strconv.Itoa(os.Getpid())+`,"locks":[
		{"name":"item:1","item_id":1,"token":5,"redis_key":"stockguard:lock:{item:1}","fence_key":"stockguard:lock:{item:1}:fence"},
		{"name":"item:2","item_id":2,"token":9,"redis_key":"stockguard:lock:{item:2}","fence_key":"stockguard:lock:{item:2}:fence"}]}`, string(a.body))
}
