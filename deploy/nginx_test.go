package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/chash"
	"github.com/stockguard/stockguard/internal/pgtest"
	"github.com/stockguard/stockguard/internal/redistest"
)

// These tests run the repository's nginx.conf in Debian's nginx, in front of three real
// storefront processes sharing a private PostgreSQL and a redis-server, as docker-compose.yml
// does with containers. Only what cannot be the same on loopback is changed: the replicas'
// addresses (storefront-N:8080 become the test's ports), the listen port, and the paths nginx
// would write outside its temporary prefix.

var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

const adminToken = "nginx-test-token"

// replicas are the storefront services of docker-compose.yml, in nginx.conf's order.
var replicas = []string{"storefront-1", "storefront-2", "storefront-3"}

// TestNginxRoutesPurchasesByItem shows, through nginx with deploy/nginx.conf: every purchase of
// one item reaches one replica, the items spread over the replicas, other requests are spread
// over all of them; when a replica is killed its items (and only its items) move to another
// replica with no purchase failing, and come back when it returns; nothing is oversold.
func TestNginxRoutesPurchasesByItem(t *testing.T) {
	nginxBin := nginxPath(t)
	dir := t.TempDir()
	bin := buildStorefront(t, dir)
	dbURL := pg.Database(t)
	rdb := redistest.Start(t)

	fronts := make([]*storefront, len(replicas))
	for i := range fronts {
		fronts[i] = startStorefront(t, bin, dir, 0, dbURL, rdb.URL())
	}
	for _, f := range fronts {
		f.waitReady(t)
	}
	ports := make([]int, len(fronts))
	for i, f := range fronts {
		ports[i] = f.port
	}
	ngx := startNginx(t, nginxBin, filepath.Join(dir, "nginx"), ports)
	replicaOf := func(addr string) int { // the storefront index of an upstream address
		for i, f := range fronts {
			if addr == f.addr() {
				return i
			}
		}
		t.Fatalf("upstream %q is none of the storefronts", addr)
		return -1
	}

	// The catalogue: 36 items of 1000 units, and a hot item of 40.
	const spread = 36
	var catalogue []item
	newItems := make([]map[string]any, 0, spread+1)
	for i := range spread {
		newItems = append(newItems, map[string]any{"sku": fmt.Sprintf("N%02d", i), "name": "item", "stock": 1000, "price_cents": 100})
	}
	newItems = append(newItems, map[string]any{"sku": "HOT", "name": "hot item", "stock": 40, "price_cents": 100})
	body, err := json.Marshal(map[string]any{"items": newItems})
	require.NoError(t, err)
	res := ngx.do(t, "POST", "/api/admin/reset", string(body), "Authorization: Bearer "+adminToken)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.NoError(t, json.Unmarshal(res.body, &catalogue))
	require.Len(t, catalogue, spread+1)
	var hot item
	var items []item
	for _, it := range catalogue {
		if it.SKU == "HOT" {
			hot = it
		} else {
			items = append(items, it)
		}
	}
	require.NotZero(t, hot.ID)
	sold := map[int64]int{} // 201 answers per item

	// buy sends n concurrent purchases of item and returns, per purchase, the answer and the
	// upstream that answered (after any retry).
	buy := func(t *testing.T, id int64, n int) []answer {
		t.Helper()
		out := make([]answer, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for k := range n {
			wg.Go(func() {
				out[k], errs[k] = ngx.send("POST", fmt.Sprintf("/api/items/%d/purchase", id), `{"quantity":1}`,
					"Idempotency-Key: "+randomID())
			})
		}
		wg.Wait()
		for k := range out {
			require.NoError(t, errs[k])
			out[k].upstreams = ngx.upstreamsOf(t, out[k].requestID)
			if out[k].status == http.StatusCreated {
				sold[id]++
			}
		}
		return out
	}
	// route buys n units of item and returns the one replica that answered them all.
	route := func(t *testing.T, id int64, n int) int {
		t.Helper()
		answers := buy(t, id, n)
		seen := map[int]bool{}
		for _, a := range answers {
			require.Equal(t, http.StatusCreated, a.status, "item %d: %s", id, a.body)
			seen[replicaOf(a.last())] = true
		}
		require.Len(t, seen, 1, "item %d: purchases reached replicas %v", id, seen)
		for r := range seen {
			return r
		}
		return -1
	}

	// 1. Each item's purchases reach one replica; the items spread over the replicas.
	home := map[int64]int{}
	perReplica := make([]int, len(fronts))
	for _, it := range items {
		home[it.ID] = route(t, it.ID, 3)
		perReplica[home[it.ID]]++
	}
	t.Logf("items per replica: %v", perReplica)
	// The load test's item routing (internal/chash) picks what nginx picked.
	addrs := make([]string, len(fronts))
	for i, f := range fronts {
		addrs[i] = f.addr()
	}
	ring := chash.New(addrs)
	for _, it := range items {
		assert.Equal(t, ring.Pick(strconv.FormatInt(it.ID, 10)), home[it.ID], "item %d: chash and nginx disagree", it.ID)
	}
	for r, n := range perReplica {
		assert.NotZero(t, n, "no item of %d hashed to %s", spread, replicas[r])
	}
	// Asked again, an item goes to the same replica.
	for _, it := range items[:6] {
		assert.Equal(t, home[it.ID], route(t, it.ID, 2), "item %d moved", it.ID)
	}
	// The hot item: 30 buyers at once, one replica.
	hotHome := route(t, hot.ID, 30)

	// 2. Other requests are spread over every replica.
	reads := map[int]int{}
	for range 12 {
		res := ngx.do(t, "GET", "/api/items", "")
		require.Equal(t, http.StatusOK, res.status)
		reads[replicaOf(ngx.upstreamsOf(t, res.requestID)[0])]++
	}
	assert.Len(t, reads, len(fronts), "12 reads reached replicas %v", reads)

	// 2b. Carts and holds carry their routing key, their anchor item (the shop page sends the
	// cart's lowest item id), in X-Route-Item: they reach that item's replica, as the item's
	// purchases do (leading zeros ignored); without it they are spread.
	partner := items[len(items)-1]
	for _, it := range items[:6] {
		body := fmt.Sprintf(`{"lines":[{"item_id":%d,"quantity":1},{"item_id":%d,"quantity":1}]}`, it.ID, partner.ID)
		for _, path := range []string{"/api/checkout", "/api/holds"} {
			res := ngx.do(t, "POST", path, body, "X-Route-Item: 0"+strconv.FormatInt(it.ID, 10))
			require.Equal(t, http.StatusCreated, res.status, "%s: %s", path, res.body)
			res.upstreams = ngx.upstreamsOf(t, res.requestID)
			assert.Equal(t, home[it.ID], replicaOf(res.last()), "%s routed by item %d", path, it.ID)
			if path == "/api/checkout" {
				sold[it.ID]++
				sold[partner.ID]++
				continue
			}
			var h struct {
				ID int64 `json:"id"`
			}
			require.NoError(t, json.Unmarshal(res.body, &h))
			require.Equal(t, http.StatusNoContent, ngx.do(t, "DELETE", fmt.Sprintf("/api/holds/%d", h.ID), "").status)
		}
	}
	carts := map[int]int{}
	for range 12 {
		body := fmt.Sprintf(`{"lines":[{"item_id":%d,"quantity":1}]}`, partner.ID)
		res := ngx.do(t, "POST", "/api/checkout", body)
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		sold[partner.ID]++
		carts[replicaOf(ngx.upstreamsOf(t, res.requestID)[0])]++
	}
	assert.Greater(t, len(carts), 1, "12 carts without X-Route-Item reached replicas %v", carts)

	// 3. Kill the hot item's replica: its items move, each to one other replica, without a
	// purchase failing; the other items stay where they were.
	dead := hotHome
	fronts[dead].kill(t)
	t.Logf("killed %s (%s)", replicas[dead], fronts[dead].addr())
	answers := buy(t, hot.ID, 30)
	moved := map[int]bool{}
	codes := map[int]int{}
	for _, a := range answers {
		codes[a.status]++
		moved[replicaOf(a.last())] = true
	}
	assert.Equal(t, map[int]int{http.StatusCreated: 10, http.StatusConflict: 20}, codes,
		"30 buyers of the hot item's last 10 units after its replica died")
	require.Len(t, moved, 1, "the hot item's purchases reached replicas %v", moved)
	assert.Equal(t, map[int]bool{ring.Order(strconv.FormatInt(hot.ID, 10))[1]: true}, moved,
		"the hot item went to the next replica on the ring")
	movedTo := map[int64]int{}
	for _, it := range items {
		r := route(t, it.ID, 2)
		if home[it.ID] == dead {
			assert.Equal(t, ring.Order(strconv.FormatInt(it.ID, 10))[1], r, "item %d: not the next replica on the ring", it.ID)
			movedTo[it.ID] = r
		} else {
			assert.Equal(t, home[it.ID], r, "item %d moved although its replica is up", it.ID)
		}
	}

	// 4. The replica comes back (same address): once nginx tries it again (fail_timeout), its
	// items return to it.
	fronts[dead] = startStorefront(t, bin, dir, fronts[dead].port, dbURL, rdb.URL())
	fronts[dead].waitReady(t)
	var back int64
	for id := range movedTo {
		back = id
		break
	}
	require.NotZero(t, back, "no item but the hot one hashed to %s", replicas[dead])
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := buy(t, back, 1)[0]
		require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
		if replicaOf(a.last()) == dead {
			break
		}
		require.True(t, time.Now().Before(deadline), "item %d did not return to %s within 15s", back, replicas[dead])
		time.Sleep(250 * time.Millisecond)
	}
	for _, it := range items {
		assert.Equal(t, home[it.ID], route(t, it.ID, 1), "item %d after %s returned", it.ID, replicas[dead])
	}

	// 5. Nothing oversold: every unit sold has one order, and the stock is what is left.
	var stats []struct {
		ItemID        int64 `json:"item_id"`
		InitialStock  int   `json:"initial_stock"`
		Stock         int   `json:"stock"`
		SoldUnits     int   `json:"sold_units"`
		OrderCount    int   `json:"order_count"`
		OversoldUnits int   `json:"oversold_units"`
	}
	res = ngx.do(t, "GET", "/api/stats", "")
	require.Equal(t, http.StatusOK, res.status)
	require.NoError(t, json.Unmarshal(res.body, &stats))
	require.Len(t, stats, len(catalogue))
	for _, s := range stats {
		assert.Equal(t, sold[s.ItemID], s.SoldUnits, "item %d: units sold", s.ItemID)
		assert.Equal(t, sold[s.ItemID], s.OrderCount, "item %d: orders", s.ItemID)
		assert.Equal(t, s.InitialStock-sold[s.ItemID], s.Stock, "item %d: stock", s.ItemID)
		assert.Zero(t, s.OversoldUnits, "item %d", s.ItemID)
	}
	assert.Equal(t, 40, sold[hot.ID], "the hot item sold out exactly")
}
