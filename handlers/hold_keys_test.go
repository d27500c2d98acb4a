package handlers_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/models"
)

// heldUnits returns item id's held_units from /api/stats.
func heldUnits(t *testing.T, e *env, id int64) int {
	t.Helper()
	var stats []inventory.ItemStats
	decode(t, e.do("GET", "/api/stats", ""), &stats)
	for _, st := range stats {
		if st.ItemID == id {
			return st.HeldUnits
		}
	}
	t.Fatalf("no stats for item %d", id)
	return 0
}

// POST /api/holds with an Idempotency-Key, on both backends: a placement whose answer was lost
// and is sent again is 200 with the same hold (its units set aside once); another cart or ttl
// under the key is 422 idempotency_conflict, as is a purchase or checkout under a hold's key
// and a hold under a purchase's; the replay shows the hold as it stands now.
func TestHoldIdempotencyKeyRoute(t *testing.T) {
	dbs.ForEach(t, func(t *testing.T, b dbtest.Backend) {
		e := newEnv(t, envOptions{backend: &b})
		first := e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":2},{"item_id":3,"quantity":1}],"ttl":"2m"}`,
			"Idempotency-Key: h-1")
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		// The answer is lost; the client sends the same hold again (its lines written otherwise).
		again := e.do("POST", "/api/holds", `{"ttl":"120s","lines":[{"item_id":3,"quantity":1},{"item_id":1,"quantity":1},{"item_id":1,"quantity":1}]}`,
			"Idempotency-Key: h-1")
		require.Equal(t, http.StatusOK, again.status, "%s", again.body)
		var h1, h2 holdAnswer
		decode(t, first, &h1)
		decode(t, again, &h2)
		assert.Equal(t, h1.ID, h2.ID)
		assert.Equal(t, models.HoldActive, h2.Status)
		assert.Equal(t, h1.Lines, h2.Lines)
		assert.True(t, h1.ExpiresAt.Equal(h2.ExpiresAt))
		assert.Equal(t, 2, heldUnits(t, e, 1), "set aside once")
		assert.Equal(t, 1, heldUnits(t, e, 3))

		for _, tc := range []struct {
			name, method, path, body, key string
		}{
			{"another cart", "POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":2}],"ttl":"2m"}`, "h-1"},
			{"another ttl", "POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":2},{"item_id":3,"quantity":1}],"ttl":"3m"}`, "h-1"},
			{"no ttl (the default)", "POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":2},{"item_id":3,"quantity":1}]}`, "h-1"},
			{"a purchase under a hold's key", "POST", "/api/items/1/purchase", `{"quantity":1}`, "h-1"},
			{"a checkout under a hold's key", "POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`, "h-1"},
		} {
			a := e.do(tc.method, tc.path, tc.body, "Idempotency-Key: "+tc.key)
			assert.Equal(t, http.StatusUnprocessableEntity, a.status, "%s: %s", tc.name, a.body)
			assert.Equal(t, "idempotency_conflict", a.errorCode(), tc.name)
			assert.Contains(t, string(a.body), "a hold of 1x2,3x1 (item x quantity) for 2m0s", tc.name)
		}
		require.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "Idempotency-Key: p-1").status)
		a := e.do("POST", "/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`, "Idempotency-Key: p-1")
		assert.Equal(t, http.StatusUnprocessableEntity, a.status, "a hold under a purchase's key: %s", a.body)
		assert.Equal(t, "idempotency_conflict", a.errorCode())
		assert.Contains(t, string(e.do("GET", "/api/items/1", "").body), `"stock":7`, "2 held, 1 sold, nothing else")

		// The replay shows the hold as it stands now.
		replay := func(key, body string) holdAnswer {
			t.Helper()
			a := e.do("POST", "/api/holds", body, "Idempotency-Key: "+key)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
			var h holdAnswer
			decode(t, a, &h)
			return h
		}
		c := e.do("POST", fmt.Sprintf("/api/holds/%d/confirm", h1.ID), "")
		require.Equal(t, http.StatusCreated, c.status, "%s", c.body)
		var order cartAnswer
		decode(t, c, &order)
		got := replay("h-1", `{"lines":[{"item_id":1,"quantity":2},{"item_id":3,"quantity":1}],"ttl":"2m"}`)
		assert.Equal(t, models.HoldConfirmed, got.Status)
		assert.Equal(t, order.OrderID, got.OrderID)

		one := `{"lines":[{"item_id":1,"quantity":1}]}`
		require.Equal(t, http.StatusCreated, e.do("POST", "/api/holds", one, "Idempotency-Key: h-2").status)
		h := replay("h-2", one)
		require.Equal(t, http.StatusNoContent, e.do("DELETE", fmt.Sprintf("/api/holds/%d", h.ID), "").status)
		assert.Equal(t, models.HoldCancelled, replay("h-2", one).Status)

		short := `{"lines":[{"item_id":1,"quantity":1}],"ttl":"1s"}`
		require.Equal(t, http.StatusCreated, e.do("POST", "/api/holds", short, "Idempotency-Key: h-3").status)
		h = replay("h-3", short)
		time.Sleep(time.Until(h.ExpiresAt) + 50*time.Millisecond)
		assert.Equal(t, models.HoldExpired, replay("h-3", short).Status)
		assert.Contains(t, string(e.do("GET", "/api/items/1", "").body), `"stock":6`, "the expired hold set aside once")

		empty := e.do("POST", "/api/holds", one, "Idempotency-Key:")
		assert.Equal(t, http.StatusBadRequest, empty.status)
		assert.Contains(t, string(empty.body), "Idempotency-Key")
		two := e.do("POST", "/api/holds", one, "Idempotency-Key: a", "Idempotency-Key: b")
		assert.Equal(t, http.StatusBadRequest, two.status)

		// Concurrent duplicates: one 201, the rest 200 with the same hold.
		const n = 8
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses = map[int]int{}
			ids      = map[int64]bool{}
		)
		for range n {
			wg.Go(func() {
				a := e.do("POST", "/api/holds", one, "Idempotency-Key: h-4")
				var h holdAnswer
				if a.status < 300 {
					decode(t, a, &h)
				}
				mu.Lock()
				defer mu.Unlock()
				statuses[a.status]++
				ids[h.ID] = true
			})
		}
		wg.Wait()
		assert.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusOK: n - 1}, statuses)
		assert.Len(t, ids, 1, "one hold")
		assert.Equal(t, 1, heldUnits(t, e, 1), "h-4's unit (h-3 expired), set aside once")
		metrics := string(e.do("GET", "/metrics", "").body)
		assert.Contains(t, metrics, `stockguard_stock_hold_requests_total{op="place",result="replayed"}`)
	})
}
