package inventory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

const lockPrefix = "stockguard:lock:"

// lockService returns a Service whose Locker is a real locking.Client on srv.
func lockService(t testing.TB, db *gorm.DB, srv *redistest.Server, opts locking.Options, wrap func(inventory.Locker) inventory.Locker) (*inventory.Service, *locking.Client) {
	t.Helper()
	rdb := warmClient(t, srv)
	opts.KeyPrefix = lockPrefix
	lc := locking.New(rdb, &opts)
	t.Cleanup(func() { _ = lc.Close() })
	var l inventory.Locker = inventory.NewLocker(lc)
	if wrap != nil {
		l = wrap(l)
	}
	s := newService(t, inventory.Config{DB: db, Locker: l, Checks: []inventory.Check{{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}}})
	return s, lc
}

// warmClient returns a client with enough connections already dialled for a burst of
// concurrent lock calls: with a short lease the lock's call timeout is a few milliseconds,
// less than dialling takes on a loaded test machine.
func warmClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	o := srv.Options()
	o.PoolSize = 64
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	var wg sync.WaitGroup
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rdb.Ping(context.Background()).Err()
		}()
	}
	wg.Wait()
	return rdb
}

// lockClient is a lock Client of srv (warmClient, the tests' key prefix), closed when the test
// ends.
func lockClient(t testing.TB, srv *redistest.Server) *locking.Client {
	t.Helper()
	lc := locking.New(warmClient(t, srv), &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

// oblivious hands out locks whose holder cannot notice their loss: their context never ends
// early, as for a process paused (GC, SIGSTOP, a slow VM) past its lease, which wakes up and
// writes before any timer of its own fires.
func oblivious(l inventory.Locker) inventory.Locker { return obliviousLocker{l} }

type obliviousLocker struct{ inventory.Locker }

func (o obliviousLocker) Obtain(ctx context.Context, key string, floor int64) (inventory.Held, error) {
	h, err := o.Locker.Obtain(ctx, key, floor)
	if err != nil {
		return nil, err
	}
	return obliviousHeld{h}, nil
}

type obliviousHeld struct{ inventory.Held }

func (obliviousHeld) Context(parent context.Context) context.Context { return parent }

// ordersOf returns every order of itemID, ascending by id.
func ordersOf(t testing.TB, s *inventory.Service, itemID int64) []inventory.Order {
	t.Helper()
	orders, err := s.ListOrders(context.Background(), inventory.OrderQuery{ItemID: itemID, Limit: 1000})
	require.NoError(t, err)
	return orders
}

// assertFenceOrder checks that the fence tokens of lock+guard's orders never go down in
// commit order (no write of an older holder after a newer one), and that each token was
// written by one transaction.
func assertFenceOrder(t testing.TB, orders []inventory.Order) {
	t.Helper()
	assertOneWritePerToken(t, orders)
	var last int64 // orders without a token of their own (a cart of several items: its lines carry them) are skipped
	for _, o := range orders {
		if o.FenceToken == 0 {
			continue
		}
		assert.GreaterOrEqual(t, o.FenceToken, last, "order %d", o.ID)
		last = o.FenceToken
	}
}

// assertOneWritePerToken checks the strict fence: every fence token was written by one
// transaction (the orders of a coalesced hold share its token and its batch id).
func assertOneWritePerToken(t testing.TB, orders []inventory.Order) {
	t.Helper()
	batchOf := map[int64]int64{}
	for _, o := range orders {
		if o.FenceToken == 0 {
			continue
		}
		assert.Positive(t, o.BatchID, "order %d", o.ID)
		if b, ok := batchOf[o.FenceToken]; ok {
			assert.Equal(t, b, o.BatchID, "token %d written by two transactions (order %d)", o.FenceToken, o.ID)
		}
		batchOf[o.FenceToken] = o.BatchID
	}
}

func TestLockStrategiesNeverOversell(t *testing.T) {
	forEachBackend(t, testLockStrategiesNeverOversell)
}

func testLockStrategiesNeverOversell(t *testing.T, be backend) {
	srv := redistest.Start(t)
	for _, name := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
		t.Run(name, func(t *testing.T) {
			db, _ := openDB(t, be)
			s, _ := lockService(t, db, srv, locking.Options{}, nil)
			id := resetItems(t, s, burstStock)[0]

			o := burst(t, []*inventory.Service{s}, name, id, burstSize, 0)
			assertSafe(t, s, id, o)
			assert.Less(t, statsOf(t, s, id).Stock, 3)
			if name == inventory.StrategyLockGuard {
				assertFenceOrder(t, ordersOf(t, s, id))
			}
		})
	}
}

// Two processes (two Services, two lock clients, two connection pools) sharing the Redis and
// the database: the Redis lock excludes across processes, unlike local.
func TestLockGuardSafeAcrossProcesses(t *testing.T) {
	forEachBackend(t, testLockGuardSafeAcrossProcesses)
}

func testLockGuardSafeAcrossProcesses(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	a, _ := lockService(t, db, srv, locking.Options{}, nil)
	b, _ := lockService(t, openPath(t, path), srv, locking.Options{}, nil)
	id := resetItems(t, a, burstStock)[0]

	o := burst(t, []*inventory.Service{a, b}, inventory.StrategyLockGuard, id, burstSize, time.Millisecond)
	assertSafe(t, a, id, o)
	assertFenceOrder(t, ordersOf(t, a, id))
}

// A lock that expires mid-purchase (short fixed lease, no watchdog, work longer than the
// lease) while its holder cannot notice: lock oversells, lock+guard does not, because the
// fence check refuses the older holder's write. This is the lesson of the fence.
func TestExpiredLockMidPurchase(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	forEachBackend(t, testExpiredLockMidPurchase)
}

func testExpiredLockMidPurchase(t *testing.T, be backend) {
	srv := redistest.Start(t)
	// The lock caps its Redis call timeout at a quarter of the lease: 150ms leaves 37ms, enough
	// on a loaded CI machine.
	opts := locking.Options{Lease: 150 * time.Millisecond, DisableWatchdog: true}
	// Slow and fast purchases alternate, so that a newer holder often writes before an older one.
	work := func(i int) time.Duration {
		if i%2 == 0 {
			return 400 * time.Millisecond
		}
		return 5 * time.Millisecond
	}
	const n, stock = 30, 15

	t.Run("lock oversells", func(t *testing.T) {
		// A race, not a script (TestStaleHolderWritesAfterNewerOne is the scripted case): two
		// holders must both read before either writes. A burst shows it most of the time; up
		// to three bursts must show it once.
		db, _ := openDB(t, be)
		s, _ := lockService(t, db, srv, opts, oblivious)
		oversold := 0
		for burst := 1; burst <= 3 && oversold == 0; burst++ {
			id := resetItems(t, s, stock)[0]
			o := burstWith(t, []*inventory.Service{s}, inventory.StrategyLock, id, n, work)
			st := statsOf(t, s, id)
			oversold = st.OversoldUnits
			t.Logf("lock, burst %d: %d ok, sold %d of %d, oversold %d, errors %v %v, retried %d", burst, o.ok, st.SoldUnits, st.InitialStock, st.OversoldUnits, o.errs, o.samples, o.retried.Load())
		}
		assert.Positive(t, oversold, "an expired lock lets two holders sell the same units")
	})
	for name, wrap := range map[string]func(inventory.Locker) inventory.Locker{
		"lock+guard safe, holder oblivious": oblivious,
		"lock+guard safe, holder told":      nil, // the real lock cancels its context at the end of the lease
	} {
		t.Run(name, func(t *testing.T) {
			db, _ := openDB(t, be)
			s, _ := lockService(t, db, srv, opts, wrap)
			id := resetItems(t, s, stock)[0]
			o := burstWith(t, []*inventory.Service{s}, inventory.StrategyLockGuard, id, n, work)
			assertSafe(t, s, id, o)
			assertFenceOrder(t, ordersOf(t, s, id))
			t.Logf("%s: %d ok, %d units, errors %v, retried %d", name, o.ok, o.units, o.errs, o.retried.Load())
		})
	}
}

// The deterministic case: A takes the lock and works past its lease; B, in another process,
// takes the expired lock, buys and writes first; then A wakes and writes. lock loses B's
// update; lock+guard refuses A's stale write, retries with a new token and records both
// purchases. (In one process, lock+guard's B would wait for A's hold in the item's queue.)
func TestStaleHolderWritesAfterNewerOne(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	forEachBackend(t, testStaleHolderWritesAfterNewerOne)
}

func testStaleHolderWritesAfterNewerOne(t *testing.T, be backend) {
	srv := redistest.Start(t)
	// A 400 ms lease with 100 ms calls: with 200 ms and its 50 ms calls, A's acquisition
	// could time out under stress-ng, or its lease end before the test saw it held.
	opts := locking.Options{Lease: 400 * time.Millisecond, CallTimeout: 100 * time.Millisecond, DisableWatchdog: true}
	for _, name := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
		t.Run(name, func(t *testing.T) {
			db, path := openDB(t, be)
			s, _ := lockService(t, db, srv, opts, oblivious)
			other, _ := lockService(t, openPath(t, path), srv, opts, oblivious)
			id := resetItems(t, s, 10)[0]
			ctx := t.Context()
			rdb := srv.Client(t)

			slow := make(chan error, 1)
			var slowRec inventory.Receipt
			go func() {
				var err error
				slowRec, _, err = purchase(s, ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name, Work: 950 * time.Millisecond})
				slow <- err
			}()
			answered, early := false, error(nil) // A's answer, when it came before A was seen holding the lock
			require.Eventually(t, func() bool {  // A holds the lock
				select {
				case early = <-slow:
					answered = true
					return true
				default:
				}
				return rdb.Exists(ctx, lockPrefix+"{item:"+itoa(id)+"}").Val() == 1
			}, 5*time.Second, time.Millisecond)
			require.False(t, answered, "A answered (%v) before it was seen holding the lock", early)
			fast, _, err := purchase(other, ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 2, Strategy: name})
			require.NoError(t, err, "B gets the lock once A's lease ran out")
			require.NoError(t, <-slow)

			st := statsOf(t, s, id)
			if name == inventory.StrategyLock {
				assert.Equal(t, 3, st.SoldUnits)
				assert.Equal(t, 9, st.Stock, "A overwrote B's update: 2 units sold twice")
				return
			}
			assert.Equal(t, 7, st.Stock, "both purchases counted")
			assert.Equal(t, 3, st.SoldUnits)
			assert.Greater(t, slowRec.FenceToken, fast.FenceToken, "A's stale write was refused and retried with a newer token")
		})
	}
}

// After the Redis data is wiped (FLUSHALL, or a restart without persistence) lock+guard keeps
// selling: the item's stored fence token is the floor of the next token.
func TestFenceFloorAfterRedisWipe(t *testing.T) { forEachBackend(t, testFenceFloorAfterRedisWipe) }

func testFenceFloorAfterRedisWipe(t *testing.T, be backend) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s, _ := lockService(t, db, srv, locking.Options{}, nil)
	id := resetItems(t, s, 100)[0]
	ctx := t.Context()
	rdb := srv.Client(t)

	var last int64
	buy := func(what string) {
		t.Helper()
		var (
			rec inventory.Receipt
			err error
		)
		// The first call after a restart may meet a dead pooled connection: allow one retry.
		for attempt := 0; attempt < 2; attempt++ {
			if rec, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard}); err == nil {
				break
			}
		}
		require.NoError(t, err, what)
		assert.Greater(t, rec.FenceToken, last, what)
		last = rec.FenceToken
	}
	for i := 0; i < 3; i++ {
		buy("before the wipe")
	}
	require.NoError(t, rdb.FlushAll(ctx).Err())
	buy("after FLUSHALL")
	buy("after FLUSHALL, again")
	srv.Restart(t)
	buy("after a restart")
	buy("after a restart, again")

	st := statsOf(t, s, id)
	assert.Equal(t, 7, st.SoldUnits)
	item, err := s.GetItem(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, last, item.FenceToken, "the item stores the last token that wrote it")
}

// The control for TestFenceFloorAfterRedisWipe: without the floor, the tokens issued after a
// wipe start again below what the database has seen, and the fence refuses every write (safe,
// but the item can no longer be sold until the counter catches up).
func TestWithoutFloorAfterRedisWipeFenceRefuses(t *testing.T) {
	forEachBackend(t, testWithoutFloorAfterRedisWipeFenceRefuses)
}

func testWithoutFloorAfterRedisWipeFenceRefuses(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s, _ := lockService(t, db, srv, locking.Options{}, func(l inventory.Locker) inventory.Locker { return noFloor{l} })
	id := resetItems(t, s, 100)[0]
	ctx := t.Context()
	for i := 0; i < 3; i++ {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		require.NoError(t, err)
	}
	require.NoError(t, srv.Client(t).FlushAll(ctx).Err())
	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	assert.ErrorIs(t, err, inventory.ErrLockLost, "tokens 1 and 2 are below the stored 3")
	assert.Equal(t, 3, statsOf(t, s, id).SoldUnits, "nothing written")
}

// noFloor drops the floor lock+guard passes.
type noFloor struct{ inventory.Locker }

func (n noFloor) Obtain(ctx context.Context, key string, _ int64) (inventory.Held, error) {
	return n.Locker.Obtain(ctx, key, 0)
}

func TestRedisDownIsUnavailableFast(t *testing.T) { forEachBackend(t, testRedisDownIsUnavailableFast) }

func testRedisDownIsUnavailableFast(t *testing.T, be backend) {
	testutil.SkipShort(t, testutil.Fault)
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s, _ := lockService(t, db, srv, locking.Options{CallTimeout: 200 * time.Millisecond}, nil)
	id := resetItems(t, s, 10)[0]
	ctx := t.Context()
	require.NoError(t, s.Ready(ctx))

	check := func(state string) {
		t.Helper()
		for _, name := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
			start := time.Now()
			_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name})
			assert.ErrorIs(t, err, inventory.ErrUnavailable, "%s, %s", state, name)
			// No hang: far below the lock wait and the lease. (A coalesced lock+guard purchase
			// with Redis refusing connections answers in about 1s since the per-node breaker's
			// changes to the lock's wait; measured, not yet explained: see the closing note.)
			assert.Less(t, time.Since(start), 2*time.Second, "%s, %s: no hang", state, name)
		}
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		assert.ErrorIs(t, s.Ready(rctx), inventory.ErrUnavailable, state)
		cancel()
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyGuard})
		assert.NoError(t, err, "%s: guard needs no Redis", state)
	}
	srv.Pause()
	check("paused (black-holed)")
	srv.Resume()
	srv.Stop()
	check("stopped")

	assert.Equal(t, 2, statsOf(t, s, id).SoldUnits, "only guard sold")
}

func TestLockWaitExhaustedIsLockTimeout(t *testing.T) {
	forEachBackend(t, testLockWaitExhaustedIsLockTimeout)
}

func testLockWaitExhaustedIsLockTimeout(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s, lc := lockService(t, db, srv, locking.Options{Wait: 100 * time.Millisecond}, nil)
	id := resetItems(t, s, 10)[0]
	ctx := t.Context()

	held, err := lc.Obtain(ctx, "item:"+itoa(id))
	require.NoError(t, err)
	defer held.Release(ctx)
	for _, name := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name})
		assert.ErrorIs(t, err, inventory.ErrLockTimeout, name)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = s.Purchase(cctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	assert.ErrorIs(t, err, inventory.ErrLockTimeout, "the caller's deadline ends the wait too")
	assert.Equal(t, 10, statsOf(t, s, id).Stock)
}

// A lock lost before the write (its context cancelled) is retried once, then ErrLockLost.
func TestLostLockRetriedThenLockLost(t *testing.T) {
	forEachBackend(t, testLostLockRetriedThenLockLost)
}

func testLostLockRetriedThenLockLost(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	// Every lock is lost about 200ms into the purchase's 1s of work.
	s, _ := lockService(t, db, srv, locking.Options{Lease: 200 * time.Millisecond, DisableWatchdog: true}, nil)
	id := resetItems(t, s, 10)[0]
	for _, name := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
		_, took, err := purchase(s, t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name, Work: time.Second})
		assert.ErrorIs(t, err, inventory.ErrLockLost, name)
		assert.Less(t, took, 900*time.Millisecond, "%s: two attempts, each cut short by the loss", name)
	}
	assert.Equal(t, 10, statsOf(t, s, id).Stock, "nothing written")
	assert.Empty(t, ordersOf(t, s, id))
}

func TestClosedLockClientIsUnavailable(t *testing.T) {
	forEachBackend(t, testClosedLockClientIsUnavailable)
}

func testClosedLockClientIsUnavailable(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s, lc := lockService(t, db, srv, locking.Options{}, nil)
	id := resetItems(t, s, 10)[0]
	require.NoError(t, lc.Close())
	_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
}

// A twin token: holder A got token T, Redis then lost its counter (FLUSHALL) before A wrote,
// and B (another process), floored by the stored fence that does not know T yet, got T as
// well. B writes first; A's write with the same token is refused by the strict fence
// (fence_token < T), and its retry takes a new lock and a greater token. No token is ever
// written by two transactions.
func TestTwinTokenAfterCounterLossIsRefused(t *testing.T) {
	forEachBackend(t, testTwinTokenAfterCounterLossIsRefused)
}

func testTwinTokenAfterCounterLossIsRefused(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, path := openDB(t, be)
	rdb := warmClient(t, srv)
	lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	const marker = 50 * time.Millisecond // A's work: B buys in the middle of it
	var s, other *inventory.Service
	var bToken int64
	var once sync.Once
	var buyInTheMiddle func(ctx context.Context) error
	sleep := func(ctx context.Context, d time.Duration) (err error) {
		if d != marker {
			return nil
		}
		once.Do(func() { err = buyInTheMiddle(ctx) })
		return err
	}
	buyInTheMiddle = func(ctx context.Context) error {
		require.NoError(t, rdb.FlushAll(ctx).Err())
		rec, err := other.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: 1, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		require.NoError(t, err, "B buys while A works")
		bToken = rec.FenceToken
		return nil
	}
	s = newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Sleep: sleep})
	other = newService(t, inventory.Config{DB: openPath(t, path), Locker: inventory.NewLocker(lc)})
	id := resetItems(t, s, 100)[0]
	require.EqualValues(t, 1, id)
	for i := 0; i < 3; i++ {
		_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard})
		require.NoError(t, err)
	}

	a, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: inventory.StrategyLockGuard, Work: marker})
	require.NoError(t, err, "A's refused write is retried under a new lock")
	assert.EqualValues(t, 4, bToken, "B got the twin of A's first token: max(counter 0, floor 3) + 1")
	assert.Greater(t, a.FenceToken, bToken, "A's retry wrote with a newer token")

	orders := ordersOf(t, s, id)
	require.Len(t, orders, 5)
	assertOneWritePerToken(t, orders)
	assert.Equal(t, 5, statsOf(t, s, id).SoldUnits)
}
