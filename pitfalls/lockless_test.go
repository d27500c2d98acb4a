//go:build !nodemo

package pitfalls_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
)

// sellN makes n purchases of one unit, one after the other, and returns how many succeeded.
func sellN(t *testing.T, s *inventory.Service, id int64, strategy string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		_, err := s.Purchase(t.Context(), req(id, strategy, 0))
		if err == nil {
			ok++
			continue
		}
		require.ErrorIs(t, err, inventory.ErrSoldOut, "only sold out is expected")
	}
	return ok
}

// The flash-sale pattern's loss: Redis is snapshotted after 3 sales of 10, sells 4 more, then
// restarts from the snapshot (a crash, or a failover to a replica that lagged): the mirror says
// 7 left where the truth is 3. redis-stock and watch sell those 7 again (4 oversold);
// redis-stock+guard sells the 3 that are left, refuses the rest at the database and gives
// the refused units back to the mirror.
func TestRedisStockRestartFromSnapshot(t *testing.T) {
	forEachBackend(t, testRedisStockRestartFromSnapshot)
}

func testRedisStockRestartFromSnapshot(t *testing.T, be backend) {
	testutil.SkipShort(t, testutil.Fault)
	for _, tc := range []struct {
		strategy string
		oversold int
	}{
		{inventory.StrategyRedisStock, 4},
		{inventory.StrategyWatch, 4},
		{inventory.StrategyRedisStockGuard, 0},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			srv := redistest.StartIn(t, t.TempDir())
			rdb := srv.Client(t)
			db, _ := openDB(t, be)
			s := newService(t, demoConfig(db, rdb))
			id := resetItem(t, s, 10)
			ctx := t.Context()

			require.Equal(t, 3, sellN(t, s, id, tc.strategy, 3))
			require.NoError(t, rdb.Save(ctx).Err()) // the snapshot: 7 left
			require.Equal(t, 4, sellN(t, s, id, tc.strategy, 4))
			srv.Restart(t) // SIGKILL, then a new redis-server loads the snapshot
			mirrored, err := rdb.Get(ctx, inventory.StockKeyPrefix+itoa(id)).Int()
			require.NoError(t, err)
			require.Equal(t, 7, mirrored, "the mirror is back above the truth (3)")

			sold := sellN(t, s, id, tc.strategy, 10)
			st := statsOf(t, s, id)
			assert.Equal(t, tc.oversold, st.OversoldUnits, describe(st))
			if tc.oversold == 0 {
				assert.Equal(t, 3, sold, "the guard sells what is left, no more")
				assert.Equal(t, 0, st.Stock)
				left, err := rdb.Get(ctx, inventory.StockKeyPrefix+itoa(id)).Int()
				require.NoError(t, err)
				assert.Equal(t, 4, left, "the mirror keeps the 4 phantom units: each refused unit was given back")
			} else {
				assert.Equal(t, 7, sold)
				assert.Equal(t, -4, st.Stock, "the database took what Redis sold")
			}
		})
	}
}

// Without a Redis loss the mirror is exact: concurrent buyers over two services (two
// processes' worth of connection pools) sell exactly the stock, and watch's aborted
// transactions are retried and counted.
func TestMirrorStrategiesSafeWithoutLoss(t *testing.T) {
	forEachBackend(t, testMirrorStrategiesSafeWithoutLoss)
}

func testMirrorStrategiesSafeWithoutLoss(t *testing.T, be backend) {
	_, rdb := redisServer(t)
	for _, strategy := range []string{inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyWatch} {
		t.Run(strategy, func(t *testing.T) {
			db, path := openDB(t, be)
			a := newService(t, demoConfig(db, rdb))
			b := newService(t, demoConfig(dbtest.Open(t, path), rdb))
			id := resetItem(t, a, 40)
			o := concurrent(t, []*inventory.Service{a, b}, id, strategy, 100, 0)
			st := statsOf(t, a, id)
			assert.Equal(t, 40, o.ok, describe(st))
			assert.Equal(t, 60, o.soldOut)
			assert.Zero(t, st.OversoldUnits, describe(st))
			assert.Equal(t, 0, st.Stock)
			if strategy == inventory.StrategyWatch {
				t.Logf("watch: %d aborted transactions retried", o.retries)
			}
		})
	}
}

// A purchase whose work fails after the mirror was decremented gives the unit back.
func TestRedisStockGivesBackWhenThePurchaseFails(t *testing.T) {
	forEachBackend(t, testRedisStockGivesBackWhenThePurchaseFails)
}

func testRedisStockGivesBackWhenThePurchaseFails(t *testing.T, be backend) {
	_, rdb := redisServer(t)
	db, _ := openDB(t, be)
	sc := newScript()
	cfg := demoConfig(db, rdb)
	cfg.Sleep = sc.sleep
	s := newService(t, cfg)
	id := resetItem(t, s, 5)
	ctx, cancel := context.WithCancel(t.Context())
	b := buy(ctx, s, req(id, inventory.StrategyRedisStockGuard, 101*time.Millisecond))
	sc.awaitStart(t, 101*time.Millisecond)
	left, err := rdb.Get(t.Context(), inventory.StockKeyPrefix+itoa(id)).Int()
	require.NoError(t, err)
	require.Equal(t, 4, left, "taken from the mirror")
	cancel()
	_, err = b.wait(t)
	require.ErrorIs(t, err, context.Canceled)
	left, err = rdb.Get(t.Context(), inventory.StockKeyPrefix+itoa(id)).Int()
	require.NoError(t, err)
	assert.Equal(t, 5, left, "given back")
	assert.Equal(t, 5, statsOf(t, s, id).Stock)
}

// optimistic: every buyer reads the same version (the script holds them all in their work
// until each has read), so all but one lose the first round and retry; nothing is oversold
// and the retries are counted in the receipts.
func TestOptimisticSafeWithCountedRetries(t *testing.T) {
	forEachBackend(t, testOptimisticSafeWithCountedRetries)
}

func testOptimisticSafeWithCountedRetries(t *testing.T, be backend) {
	db, path := openDB(t, be)
	const n = 8
	var (
		mu      sync.Mutex
		reading = n
		round   = make(chan struct{})
	)
	// The first work of each buyer waits until all n have read the row; later ones do not.
	barrier := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		first := reading > 0
		if first {
			if reading--; reading == 0 {
				close(round)
			}
		}
		mu.Unlock()
		if first {
			select {
			case <-round:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	cfgA := inventory.Config{DB: db, Extra: inventory.DemoStrategies(inventory.DemoDeps{}), Default: inventory.StrategyGuard, Sleep: barrier}
	cfgB := cfgA
	cfgB.DB = dbtest.Open(t, path)
	a, b := newService(t, cfgA), newService(t, cfgB)
	id := resetItem(t, a, 5)
	o := concurrent(t, []*inventory.Service{a, b}, id, inventory.StrategyOptimistic, n, time.Millisecond)
	st := statsOf(t, a, id)
	assert.Equal(t, 5, o.ok, describe(st))
	assert.Equal(t, n-5, o.soldOut)
	assert.Zero(t, st.OversoldUnits)
	assert.Equal(t, 0, st.Stock)
	assert.GreaterOrEqual(t, o.retries, 4, "the 4 winners after the first lost at least the first round")
	t.Logf("optimistic: %d buyers, %d sold, %d retries", n, o.ok, o.retries)
}

// counts is the outcome of concurrent purchases.
type counts struct {
	mu      sync.Mutex
	ok      int
	soldOut int
	retries int
}

// concurrent starts n one-unit purchases at once, round-robin over services, and waits.
func concurrent(t *testing.T, services []*inventory.Service, id int64, strategy string, n int, work time.Duration) *counts {
	t.Helper()
	var (
		o     counts
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rec, err := services[i%len(services)].Purchase(context.Background(), req(id, strategy, work))
			o.mu.Lock()
			defer o.mu.Unlock()
			switch {
			case err == nil:
				o.ok++
				o.retries += rec.Retries
			case assert.ErrorIs(t, err, inventory.ErrSoldOut):
				o.soldOut++
			}
		}()
	}
	close(start)
	wg.Wait()
	return &o
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// On a Redis Cluster (three real masters) the mirror's keys and the pitfall locks' keys spread
// over the slots: the reset's deletions reach every master, the scripts and WATCH touch one key
// each, and the demo strategies sell as on one node.
func TestDemoStrategiesOnRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := redistest.ClusterClient(t, cl)
	db, _ := openDB(t, sqliteBackend)
	s := newService(t, demoConfig(db, rdb))
	ctx := t.Context()
	items := make([]inventory.NewItem, 12)
	for i := range items {
		items[i] = inventory.NewItem{SKU: "C-" + itoa(int64(i)), Name: "item", Stock: 2, PriceCents: 100}
	}
	require.NoError(t, s.Reset(ctx, items))
	list, err := s.ListItems(ctx)
	require.NoError(t, err)
	for i, it := range list {
		strategy := []string{inventory.StrategyRedisStock, inventory.StrategyRedisStockGuard, inventory.StrategyWatch,
			inventory.StrategyFixedLease, inventory.StrategyDelRelease}[i%5]
		assert.Equal(t, 2, sellN(t, s, it.ID, strategy, 3), "%s on item %d", strategy, it.ID)
		_, err := s.Purchase(crashCtx(t, ctx), req(it.ID, inventory.StrategySetnxExpire, 0))
		require.ErrorIs(t, err, inventory.ErrUnavailable)
	}
	count := func(pattern string) int {
		var n atomic.Int64 // ForEachMaster visits the masters concurrently
		require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			keys, err := node.Keys(ctx, pattern).Result()
			n.Add(int64(len(keys)))
			return err
		}))
		return int(n.Load())
	}
	require.Equal(t, len(list), count(inventory.PitfallKeyPrefix(inventory.StrategySetnxExpire)+"*}"), "one no-TTL key per item")
	require.Equal(t, len(list), count(inventory.StockKeyPrefix+"*"))

	require.NoError(t, s.Reset(ctx, items[:3]))
	assert.Zero(t, count(inventory.PitfallKeyPrefix(inventory.StrategySetnxExpire)+"*"), "the reset deleted them on every master")
	assert.Equal(t, 3, count(inventory.StockKeyPrefix+"*"), "only the new catalogue is mirrored")
}
