package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// These tests run the default lock+guard strategy through HTTP with a real redis-server.

func TestConcurrentPurchasesWithRealLock(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t), demo: true})
	const buyers = 30
	var wg sync.WaitGroup
	codes := make(chan int, buyers)
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.srv.URL+"/api/items/1/purchase", strings.NewReader(`{"quantity":1}`))
			req.Header.Set("Idempotency-Key", fmt.Sprintf("buyer-%d", i))
			req.Header.Set("X-Simulated-Work", "2ms")
			codes <- e.send(req).status
		}(i)
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{http.StatusCreated: 10, http.StatusConflict: 20}, count)

	var stats []inventory.ItemStats
	decode(t, e.do("GET", "/api/stats", ""), &stats)
	assert.Equal(t, 0, stats[0].Stock)
	assert.Equal(t, 10, stats[0].SoldUnits)
	assert.Equal(t, 0, stats[0].OversoldUnits)

	metrics := string(e.do("GET", "/metrics", "").body)
	assert.Contains(t, metrics, `stockguard_purchases_total{result="created",strategy="lock+guard"} 10`)
	assert.Contains(t, metrics, `stockguard_item_stock{item_id="1",sku="T-1"} 0`)
	assert.NotContains(t, metrics, "stockguard_lock_wait_seconds_count 0")
	assert.Contains(t, metrics, `stockguard_holds_total{item_id="1"}`)
	assert.Regexp(t, `stockguard_batch_size_sum 10\n`, metrics, "the holds wrote the 10 orders")
}

// serverTiming parses a Server-Timing header "work;dur=X, lock;dur=Y" into milliseconds.
func serverTiming(t *testing.T, a answer) (work, lock float64) {
	t.Helper()
	h := a.header.Get("Server-Timing")
	_, err := fmt.Sscanf(h, "work;dur=%g, lock;dur=%g", &work, &lock)
	require.NoError(t, err, "Server-Timing %q (status %d)", h, a.status)
	return work, lock
}

// In demo mode every purchase answer, errors too, tells the work spent and the lock wait:
// guard spends its work before the database refuses it; lock+guard refuses a sold-out buyer
// before any work.
func TestServerTiming(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t), demo: true})
	a := e.do("POST", "/api/items/3/purchase", `{"quantity":1}`, "X-Simulated-Work: 30ms")
	require.Equal(t, http.StatusCreated, a.status)
	work, lock := serverTiming(t, a)
	assert.GreaterOrEqual(t, work, 30.0)
	assert.GreaterOrEqual(t, lock, 0.0)

	a = e.do("POST", "/api/items/3/purchase", `{"quantity":1}`, "X-Simulated-Work: 30ms", "X-Strategy: guard")
	require.Equal(t, http.StatusConflict, a.status)
	work, _ = serverTiming(t, a)
	assert.GreaterOrEqual(t, work, 30.0, "guard wasted its work on a refused purchase")

	a = e.do("POST", "/api/items/3/purchase", `{"quantity":1}`, "X-Simulated-Work: 30ms")
	require.Equal(t, http.StatusConflict, a.status)
	work, _ = serverTiming(t, a)
	assert.Zero(t, work, "lock+guard refused it with no work spent")

	a = e.do("POST", "/api/items/3/purchase", `{"quantity":0}`)
	require.Equal(t, http.StatusBadRequest, a.status)
	serverTiming(t, a)

	plain := newEnv(t, envOptions{})
	assert.Empty(t, plain.do("POST", "/api/items/1/purchase", `{"quantity":1}`).header.Get("Server-Timing"), "demo mode only")
}

func TestLockTimeoutThroughHTTP(t *testing.T) {
	rs := redistest.Start(t)
	e := newEnv(t, envOptions{redis: rs, lockWait: 200 * time.Millisecond})

	// Another process holds item 3's lock.
	other := locking.New(rs.Client(t), &locking.Options{KeyPrefix: lockKeyPrefix})
	t.Cleanup(func() { _ = other.Close() })
	held, err := other.Obtain(context.Background(), "item:3")
	require.NoError(t, err)

	start := time.Now()
	a := e.do("POST", "/api/items/3/purchase", `{"quantity":1}`)
	assert.Equal(t, http.StatusServiceUnavailable, a.status, "body %s", a.body)
	assert.Equal(t, "lock_timeout", a.errorCode())
	assert.Equal(t, "1", a.header.Get("Retry-After"))
	assert.Less(t, time.Since(start), 3*time.Second)

	require.NoError(t, held.Release(context.Background()))
	a = e.do("POST", "/api/items/3/purchase", `{"quantity":1}`)
	assert.Equal(t, http.StatusCreated, a.status, "body %s", a.body)
}

func TestRedisDownThroughHTTP(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	rs := redistest.Start(t)
	e := newEnv(t, envOptions{redis: rs})
	require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`).status)
	rs.Stop()

	start := time.Now()
	a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`)
	assert.Equal(t, http.StatusServiceUnavailable, a.status, "body %s", a.body)
	assert.Equal(t, "unavailable", a.errorCode())
	assert.Equal(t, "1", a.header.Get("Retry-After"))
	assert.Less(t, time.Since(start), 5*time.Second, "Redis down answers quickly")

	a = e.do("GET", "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	// The catalogue does not need Redis.
	assert.Equal(t, http.StatusOK, e.do("GET", "/api/items", "").status)
}

func TestDebugLocksShowsTheHolder(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t), demo: true})
	done := make(chan answer, 1)
	go func() {
		done <- e.do("POST", "/api/items/2/purchase", `{"quantity":1}`, "X-Simulated-Work: 400ms")
	}()
	var body struct {
		Locks []struct {
			Name  string `json:"name"`
			Token int64  `json:"token"`
		} `json:"locks"`
	}
	require.Eventually(t, func() bool {
		decode(t, e.do("GET", "/api/debug/locks", ""), &body)
		return len(body.Locks) == 1
	}, 2*time.Second, 10*time.Millisecond)
	assert.Equal(t, "item:2", body.Locks[0].Name)

	a := <-done
	require.Equal(t, http.StatusCreated, a.status)
	var r inventory.Receipt
	decode(t, a, &r)
	assert.Equal(t, r.FenceToken, body.Locks[0].Token)
	decode(t, e.do("GET", "/api/debug/locks", ""), &body)
	assert.Empty(t, body.Locks, "released")
}

// Go's profiles are served in demo mode only.
func TestPprofDemoOnly(t *testing.T) {
	demo := newEnv(t, envOptions{demo: true})
	a := demo.do("GET", "/debug/pprof/", "")
	require.Equal(t, http.StatusOK, a.status)
	assert.Contains(t, string(a.body), "goroutine")
	a = demo.do("GET", "/debug/pprof/goroutine?debug=1", "")
	require.Equal(t, http.StatusOK, a.status)
	assert.Contains(t, string(a.body), "goroutine profile")
	// Not to a page of another site that renamed itself to loopback (DNS rebinding): a
	// process's command line and heap are its own.
	req, err := http.NewRequest("GET", demo.srv.URL+"/debug/pprof/cmdline", nil)
	require.NoError(t, err)
	req.Host = "attacker.example"
	res, err := demo.srv.Client().Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode)

	plain := newEnv(t, envOptions{})
	a = plain.do("GET", "/debug/pprof/", "")
	assert.Equal(t, http.StatusNotFound, a.status)
	assert.Contains(t, string(a.body), `"code":"not_found"`)
}

// Checkouts and hold placements answer Server-Timing in demo mode as purchases do: a sold
// cart spent its work, a cart refused on its stock read none, a hold none (it has no work),
// and errors carry it too.
func TestServerTimingOfCarts(t *testing.T) {
	e := newEnv(t, envOptions{redis: redistest.Start(t), demo: true})
	a := e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1},{"item_id":2,"quantity":1}]}`, "X-Simulated-Work: 30ms")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	work, lock := serverTiming(t, a)
	assert.GreaterOrEqual(t, work, 30.0)
	assert.GreaterOrEqual(t, lock, 0.0)

	a = e.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1000}]}`, "X-Simulated-Work: 30ms")
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	work, _ = serverTiming(t, a)
	assert.Zero(t, work, "refused on its stock read, before any work")

	a = e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	work, _ = serverTiming(t, a)
	assert.Zero(t, work)

	// A lock+guard cart (the default here, as the hold above and the first checkout) waits at
	// its anchor's coalesced hold, which counts it: three carts, one hold each.
	a = e.do("POST", "/api/checkout", `{"lines":[{"item_id":2,"quantity":1},{"item_id":1,"quantity":1}]}`,
		"X-Simulated-Work: 10ms", "X-Strategy: lock+guard")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	work, _ = serverTiming(t, a)
	assert.GreaterOrEqual(t, work, 10.0)
	metrics := string(e.do("GET", "/metrics", "").body)
	assert.Regexp(t, `stockguard_hold_carts_sum 3\n`, metrics, "the holds served the three carts")
	assert.Regexp(t, `stockguard_hold_carts_count 3\n`, metrics)

	a = e.do("POST", "/api/holds", `{"lines":[]}`)
	require.Equal(t, http.StatusBadRequest, a.status)
	serverTiming(t, a)
	a = e.do("POST", "/api/checkout", `{"lines":[]}`)
	require.Equal(t, http.StatusBadRequest, a.status)
	serverTiming(t, a)

	plain := newEnv(t, envOptions{})
	assert.Empty(t, plain.do("POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`).header.Get("Server-Timing"), "demo mode only")
}
