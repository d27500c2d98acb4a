//go:build !nodemo

package pitfalls_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/dbtest"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/pitfalls"
)

// lease is the fixed lease of the pitfall locks in these tests; wait their lock wait.
const (
	lease = 300 * time.Millisecond
	wait  = time.Second
)

// dbs are the database backends of this package's tests (its PostgreSQL server starts on
// first use).
var dbs = dbtest.NewSet("pitfalls.db")

func TestMain(m *testing.M) {
	code := m.Run()
	dbs.Close()
	os.Exit(code)
}

type backend = dbtest.Backend

var sqliteBackend = dbs.SQLite

// forEachBackend runs test once per backend, as subtests named after the backend: every
// strategy, the demo ones too, works on SQLite and PostgreSQL.
func forEachBackend(t *testing.T, test func(t *testing.T, be backend)) { dbs.ForEach(t, test) }

// openDB opens a fresh database of backend be; the returned dsn opens it again.
func openDB(t testing.TB, be backend) (*gorm.DB, string) {
	t.Helper()
	return be.Open(t)
}

// demoConfig is a demo service's configuration over db and the redis-server of rdb, with the
// pitfall locks (lease, wait) and the stock mirror wired as main wires them.
func demoConfig(db *gorm.DB, rdb redis.UniversalClient) inventory.Config {
	opts := func(name string) pitfalls.Options {
		return pitfalls.Options{KeyPrefix: inventory.PitfallKeyPrefix(name), Lease: lease, Wait: wait}
	}
	return inventory.Config{
		DB: db,
		Extra: inventory.DemoStrategies(inventory.DemoDeps{
			Pitfalls: map[string]inventory.Locker{
				inventory.StrategySetnxExpire: pitfalls.NewSetnxExpire(rdb, opts(inventory.StrategySetnxExpire)),
				inventory.StrategyDelRelease:  pitfalls.NewDelRelease(rdb, opts(inventory.StrategyDelRelease)),
				inventory.StrategyFixedLease:  pitfalls.NewFixedLease(rdb, opts(inventory.StrategyFixedLease)),
			},
			Mirror: pitfalls.NewMirror(rdb, inventory.StockKeyPrefix),
		}),
		Default: inventory.StrategyGuard,
	}
}

// crashing is the interceptor of a purchase whose setnx-expire holder dies between its SETNX
// and its EXPIRE, as the lab builds it: its lock is pitfalls.Crashing's.
type crashing struct{ t testing.TB }

func (c crashing) Locker(strategy string, l inventory.Locker) inventory.Locker {
	cl, ok := pitfalls.Crashing(l)
	if !ok {
		c.t.Errorf("%s: pitfalls.Crashing has no crashing variant of %T", strategy, l)
	}
	return cl
}

func (crashing) BeforeWrite(context.Context, int64, string) error { return nil }

// crashCtx is ctx for a purchase whose setnx-expire holder crashes.
func crashCtx(t testing.TB, ctx context.Context) context.Context {
	return inventory.WithInterceptor(ctx, crashing{t})
}

func newService(t testing.TB, cfg inventory.Config) *inventory.Service {
	t.Helper()
	s, err := inventory.NewService(cfg)
	require.NoError(t, err)
	return s
}

// resetItem replaces the catalogue with one item of stock units and returns its id.
func resetItem(t testing.TB, s *inventory.Service, stock int) int64 {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.Reset(ctx, []inventory.NewItem{{SKU: "SKU-1", Name: "item", Stock: stock, PriceCents: 100}}))
	items, err := s.ListItems(ctx)
	require.NoError(t, err)
	require.Len(t, items, 1)
	return items[0].ID
}

func statsOf(t testing.TB, s *inventory.Service, id int64) inventory.ItemStats {
	t.Helper()
	stats, err := s.Stats(context.Background())
	require.NoError(t, err)
	for _, st := range stats {
		if st.ItemID == id {
			return st
		}
	}
	t.Fatalf("no stats for item %d", id)
	return inventory.ItemStats{}
}

// redisServer starts a real redis-server and returns it with a client.
func redisServer(t testing.TB) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, srv.Client(t)
}

// waitGone waits until key no longer exists in Redis (a lease ran out), bounded.
func waitGone(t testing.TB, rdb redis.UniversalClient, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.Exists(context.Background(), key).Result()
		require.NoError(t, err)
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "key %s still there after 10s", key)
		time.Sleep(5 * time.Millisecond)
	}
}

// script is a Config.Sleep that lets the test decide when each buyer's work ends: a buyer is
// named by its simulated work (a distinct duration per buyer); its work starts by announcing
// itself on started and ends when the test closes its gate.
type script struct {
	mu      sync.Mutex
	gates   map[time.Duration]chan struct{}
	started chan time.Duration
}

func newScript() *script {
	return &script{gates: map[time.Duration]chan struct{}{}, started: make(chan time.Duration, 64)}
}

func (s *script) gate(d time.Duration) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gates[d]
	if g == nil {
		g = make(chan struct{})
		s.gates[d] = g
	}
	return g
}

func (s *script) sleep(ctx context.Context, d time.Duration) error {
	if d == 0 {
		return nil
	}
	s.started <- d
	select {
	case <-s.gate(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish ends buyer d's work.
func (s *script) finish(d time.Duration) { close(s.gate(d)) }

// awaitStart waits until buyer d's work has started (so it holds whatever it took before).
func (s *script) awaitStart(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case got := <-s.started:
		require.Equal(t, d, got, "buyer %s started its work, %s expected", got, d)
	case <-time.After(10 * time.Second):
		t.Fatalf("buyer %s did not start its work", d)
	}
}

// buyer runs one purchase in a goroutine; wait returns its result.
type buyer struct {
	done chan struct{}
	rec  inventory.Receipt
	err  error
}

func buy(ctx context.Context, s *inventory.Service, req inventory.PurchaseRequest) *buyer {
	b := &buyer{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.rec, b.err = s.Purchase(ctx, req)
	}()
	return b
}

func (b *buyer) wait(t testing.TB) (inventory.Receipt, error) {
	t.Helper()
	select {
	case <-b.done:
		return b.rec, b.err
	case <-time.After(20 * time.Second):
		t.Fatal("purchase did not return")
		return inventory.Receipt{}, nil
	}
}

func req(id int64, strategy string, work time.Duration) inventory.PurchaseRequest {
	return inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: strategy, Work: work}
}

func describe(st inventory.ItemStats) string {
	return fmt.Sprintf("stock %d of %d, %d units sold in %d orders, %d oversold",
		st.Stock, st.InitialStock, st.SoldUnits, st.OrderCount, st.OversoldUnits)
}
