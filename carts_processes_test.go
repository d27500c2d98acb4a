package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// TestCartsAcrossOSProcessesNeverDeadlock is inventory's TestCartsAcrossProcessesNeverDeadlock
// over two storefront processes (the storefront binary, built here, two OS processes on one
// real redis-server and one SQLite file), through HTTP: carts {H,A} with both items hot, and
// single purchases of H at the first storefront and mostly of A at the second, so that the
// first coalesces carts on H (their lowest item, whose worker its purchases of H keep running)
// and the second on A (a cart waits at an item whose worker runs). A hold of H in one process
// tries A's lock while a hold of A in the other tries H's: neither waits, and a cart left
// queued too often has its locks taken in item order, holding nothing first (docs/DESIGN.md
// §5.3, "no cycle of lock waits"). A cycle of waits would end only at the lock wait as 503
// lock_timeout: every request must be 201, within the lock wait plus its work.
func TestCartsAcrossOSProcessesNeverDeadlock(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess) // builds the storefront and runs two of it
	const (
		carts   = 1000
		workers = 6 // per storefront
		wait    = 10 * time.Second
		work    = time.Millisecond
	)
	bin := buildBinary(t)
	rdb := redistest.Start(t)
	db := filepath.Join(t.TempDir(), "carts.db")
	var servers [2]*server
	for i := range servers {
		servers[i] = startBinary(t, bin, "--addr", "127.0.0.1:0", "--db", db, "--demo", "--admin-token", "carts-token",
			"--redis", "redis://"+rdb.Addr()+"/0", "--lock-wait", wait.String(), "--log-level", "debug", "--shutdown-timeout", "10s")
	}
	var items []item
	reset := `{"items":[{"sku":"H","name":"h","stock":1000000,"price_cents":1},{"sku":"A","name":"a","stock":1000000,"price_cents":1}]}`
	require.Equal(t, http.StatusOK, servers[0].call("POST", "/api/admin/reset", reset, &items, "Authorization: Bearer carts-token"))
	h, a := items[0].ID, items[1].ID
	cartBody := fmt.Sprintf(`{"lines":[{"item_id":%d,"quantity":1},{"item_id":%d,"quantity":1}]}`, h, a)

	var (
		next    atomic.Int64 // carts handed out
		longest atomic.Int64 // the longest answer, in ns
		wg      sync.WaitGroup
		mu      sync.Mutex
		units   = map[int64]int{} // units answered 201, by item
	)
	for p, s := range servers {
		for w := range workers {
			wg.Go(func() {
				client := &http.Client{Timeout: 2 * wait, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				defer client.CloseIdleConnections()
				for i := 0; next.Add(1) <= carts; i++ {
					// Each loop: one cart {H,A}, then a single purchase: of H at the first
					// storefront; of A at the second, of H one time in four.
					item := h
					if p == 1 && (i+w)%4 != 0 {
						item = a
					}
					for _, req := range []struct {
						path, body string
						items      []int64
					}{
						{"/api/checkout", cartBody, []int64{h, a}},
						{fmt.Sprintf("/api/items/%d/purchase", item), `{"quantity":1}`, []int64{item}},
					} {
						r, err := http.NewRequest("POST", s.url+req.path, strings.NewReader(req.body))
						if !assert.NoError(t, err) {
							return
						}
						r.Header.Set("Content-Type", "application/json")
						r.Header.Set("X-Strategy", "lock+guard")
						r.Header.Set("X-Simulated-Work", work.String())
						start := time.Now()
						res, err := client.Do(r)
						took := time.Since(start)
						if !assert.NoError(t, err, "storefront %d %s", p+1, req.path) {
							return
						}
						b, _ := io.ReadAll(res.Body)
						res.Body.Close()
						for old := longest.Load(); took > time.Duration(old) && !longest.CompareAndSwap(old, int64(took)); old = longest.Load() {
						}
						if !assert.Equal(t, http.StatusCreated, res.StatusCode, "storefront %d %s: %s", p+1, req.path, b) {
							return
						}
						mu.Lock()
						for _, id := range req.items {
							units[id]++
						}
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	var queued, ordered int
	for _, s := range servers {
		logs := s.logs.String()
		queued += strings.Count(logs, "cart left queued")
		ordered += strings.Count(logs, "taking their locks in item order")
	}
	t.Logf("longest answer %s; carts left queued (another of their locks taken) %d times, locks taken in item order %d times",
		time.Duration(longest.Load()), queued, ordered)
	assert.Less(t, time.Duration(longest.Load()), wait+work, "every request answered within the lock wait plus its work")
	assert.Positive(t, queued, "the holds of the two processes crossed: a hold found another lock of a cart taken")

	var stats []struct {
		ItemID       int64 `json:"item_id"`
		InitialStock int   `json:"initial_stock"`
		Stock        int   `json:"stock"`
		SoldUnits    int   `json:"sold_units"`
	}
	require.Equal(t, http.StatusOK, servers[1].call("GET", "/api/stats", "", &stats))
	for _, st := range stats {
		assert.Equal(t, st.InitialStock-st.Stock, st.SoldUnits, "item %d: every unit taken is sold", st.ItemID)
		assert.Equal(t, units[st.ItemID], st.SoldUnits, "item %d: the units sold are those answered 201", st.ItemID)
	}
	raw, _ := json.Marshal(stats)
	t.Logf("stats: %s", raw)
}
