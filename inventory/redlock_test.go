package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// redlockService returns a Service offering redlock+guard over three fresh redis-servers.
func redlockService(t *testing.T, be backend) (*inventory.Service, []*redistest.Server) {
	t.Helper()
	db, _ := openDB(t, be)
	srvs := make([]*redistest.Server, 3)
	nodes := make([]redis.UniversalClient, 3)
	for i := range srvs {
		srvs[i] = redistest.Start(t)
		o := srvs[i].Options()
		o.DialerRetries = 1 // a stopped node refuses at once, not after 5 dials 100ms apart
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		nodes[i] = c
	}
	rl := locking.NewRedlock(nodes, &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = rl.Close() })
	s := newService(t, inventory.Config{DB: db, Redlock: inventory.NewRedlockLocker(rl)})
	return s, srvs
}

func TestRedlockGuardNeverOversells(t *testing.T) { forEachBackend(t, testRedlockGuardNeverOversells) }

func testRedlockGuardNeverOversells(t *testing.T, be backend) {
	testutil.SkipShort(t, testutil.Fault)
	s, srvs := redlockService(t, be)
	assert.Contains(t, s.Strategies(), inventory.StrategyRedlockGuard)
	id := resetItems(t, s, burstStock)[0]
	srvs[2].Stop() // a minority down changes nothing
	// Fewer purchases than the other strategies' bursts: Redlock waiters poll, so a handoff
	// costs a backoff, and split votes among many contenders cost retries.
	o := burst(t, []*inventory.Service{s}, inventory.StrategyRedlockGuard, id, 60, 0)
	assertSafe(t, s, id, o)
	assertFenceOrder(t, ordersOf(t, s, id))
}

func TestRedlockGuardQuorumLostIsUnavailable(t *testing.T) {
	forEachBackend(t, testRedlockGuardQuorumLostIsUnavailable)
}

func testRedlockGuardQuorumLostIsUnavailable(t *testing.T, be backend) {
	testutil.SkipShort(t, testutil.Fault)
	s, srvs := redlockService(t, be)
	id := resetItems(t, s, 10)[0]
	srvs[0].Stop()
	srvs[1].Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyRedlockGuard})
	require.Error(t, err)
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
}
