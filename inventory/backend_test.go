package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// Every write transaction has a deadline of its own: a purchase stuck behind another
// transaction's row lock gives up at Config.WriteTimeout with ErrUnavailable and writes
// nothing, even though neither the caller's context nor the statement timeout (5s) has ended.
// (On SQLite the one wait a write can meet is the busy handler, which no deadline interrupts:
// the busy timeout bounds it, and TestDatabaseBusyRetriedOnceThenUnavailable tests it.)
func TestPostgresWriteTransactionDeadline(t *testing.T) {
	testutil.SkipShort(t, testutil.Postgres)
	be := postgresBackend
	db, dsn := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard, WriteTimeout: 300 * time.Millisecond})
	id := resetItems(t, s, 10)[0]
	other := openPath(t, dsn)

	holder := other.Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec("SELECT id FROM items WHERE id = ? FOR UPDATE", id).Error)
	start := time.Now()
	_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	took := time.Since(start)
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	assert.ErrorContains(t, err, "deadline")
	assert.Less(t, took, 4*time.Second, "the deadline, not the 5s statement timeout, ended it")
	require.NoError(t, holder.Rollback().Error)

	st := statsOf(t, s, id)
	assert.Equal(t, 10, st.Stock, "nothing written")
	assert.Zero(t, st.OrderCount)
	recovers(t, s, id, "the lock is free")
}

// A read of the stock that the database does not answer (here: another transaction holds the
// items table in ACCESS EXCLUSIVE mode, so every SELECT of it waits) ends at the write's
// deadline with 503 unavailable, not at the 5s statement timeout: the read that begins a
// coalesced hold runs under its worker's context, which never ends, and without a deadline of
// its own it kept every buyer of the item waiting as long as the database hung.
func TestPostgresReadDeadline(t *testing.T) {
	testutil.SkipShort(t, testutil.Postgres)
	srv := redistest.Start(t)
	db, dsn := openDB(t, postgresBackend)
	lc := locking.New(warmClient(t, srv), &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), WriteTimeout: 300 * time.Millisecond})
	id := resetItems(t, s, 10)[0]
	other := openPath(t, dsn)
	holder := other.Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec("LOCK TABLE items IN ACCESS EXCLUSIVE MODE").Error)
	start := time.Now()
	_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1})
	took := time.Since(start)
	require.NoError(t, holder.Rollback().Error)
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	assert.ErrorContains(t, err, "a read of item")
	assert.Less(t, took, 4*time.Second, "the deadline, not the 5s statement timeout, ended it")
	recovers(t, s, id, "the table is free")
}

// recovers waits until a purchase of item id succeeds again, now that what held it is gone
// (why). It waits for the event, not for one try: the purchase's read and write keep the
// test's 300 ms deadline, and under make test's load the fresh connection that replaces the
// one the deadline ended took longer than that (failed to connect: timeout).
// The wait is bounded below the 5 s statement timeout, so a service that stayed stuck until
// the statement timeout still fails.
func recovers(t *testing.T, s *inventory.Service, id int64, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	var err error
	for tries := 1; ctx.Err() == nil; tries++ {
		if _, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1}); err == nil {
			t.Logf("recovered at try %d", tries)
			return
		}
		require.ErrorIs(t, err, inventory.ErrUnavailable, "a failed try is an unavailable answer")
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no purchase succeeded in 4s once %s: %v", why, err)
}

// waitingBackend returns the process id of the PostgreSQL backend that waits for a lock while
// running a statement that starts with prefix.
func waitingBackend(t *testing.T, db *gorm.DB, prefix string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		err := db.Raw(`SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE ?`, prefix+"%").Row().Scan(&pid)
		return err == nil && pid != 0
	}, 10*time.Second, 5*time.Millisecond, "no backend waits on a lock running %q", prefix)
	return pid
}

// A connection lost in the middle of the write transaction (its backend terminated while the
// guarded UPDATE waits for the row) is 503 unavailable, and the server rolled the transaction
// back: nothing half-written.
func TestPostgresConnectionLostMidTransaction(t *testing.T) {
	testutil.SkipShort(t, testutil.Postgres)
	db, dsn := openDB(t, postgresBackend)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	id := resetItems(t, s, 10)[0]
	other := openPath(t, dsn)
	holder := other.Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec("SELECT id FROM items WHERE id = ? FOR UPDATE", id).Error)

	done := make(chan error, 1)
	go func() {
		_, err := s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, IdempotencyKey: "lost-1"})
		done <- err
	}()
	pid := waitingBackend(t, other, "UPDATE items")
	require.NoError(t, other.Exec("SELECT pg_terminate_backend(?)", pid).Error)
	err := <-done
	assert.ErrorIs(t, err, inventory.ErrUnavailable)
	require.NoError(t, holder.Rollback().Error)

	st := statsOf(t, s, id)
	assert.Equal(t, 10, st.Stock, "nothing written")
	assert.Zero(t, st.OrderCount)
	rec, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, IdempotencyKey: "lost-1"})
	require.NoError(t, err, "the client's retry with its key succeeds")
	assert.False(t, rec.Replayed, "nothing was written the first time")
}

// A deadlock (40P01) is retried once, like SQLite's busy: another transaction holds an
// uncommitted order with the purchase's Idempotency-Key (the purchase's INSERT waits for it)
// and then asks for the item row the purchase has updated. PostgreSQL aborts the purchase's
// transaction (its deadlock_timeout, 1s, fires first: the other one's is 10s); the retry waits
// for the other transaction, which rolls back, and succeeds.
func TestPostgresDeadlockRetriedOnce(t *testing.T) {
	testutil.SkipShort(t, testutil.Postgres)
	_, dsn := openDB(t, postgresBackend)
	// PostgreSQL looks for a deadlock once, deadlock_timeout after a backend starts waiting.
	// The purchase's check must come after t1 has joined the cycle, which on a loaded machine
	// can take longer than the default 1s: the storefront's connections get 3s (t1's is 10s,
	// so the purchase is the victim), still within the 5s statement timeout.
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("deadlock_timeout", "3s")
	u.RawQuery = q.Encode()
	db := openPath(t, u.String())
	var dt string
	require.NoError(t, db.Raw("SHOW deadlock_timeout").Row().Scan(&dt))
	require.Equal(t, "3s", dt)
	// The guard strategy calls Sleep once per attempt, before its transaction: the retry waits
	// there until t1 is over, so that it cannot take the row before t1 and deadlock again.
	var attempts atomic.Int64
	t1Done := make(chan struct{})
	sleep := func(ctx context.Context, _ time.Duration) error {
		if attempts.Add(1) == 2 {
			select {
			case <-t1Done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard, Sleep: sleep})
	id := resetItems(t, s, 10)[0]
	other := openPath(t, dsn)
	deadlocks := func() int64 {
		var n int64
		require.NoError(t, other.Raw("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").Row().Scan(&n))
		return n
	}
	before := deadlocks()

	t1 := other.Begin()
	require.NoError(t, t1.Error)
	defer t1.Rollback()
	require.NoError(t, t1.Exec("SET LOCAL deadlock_timeout = '10s'").Error)
	require.NoError(t, t1.Exec(`INSERT INTO orders (item_id, quantity, strategy, fence_token, idempotency_key, fingerprint, remaining, created_at)
		VALUES (?, 1, 'guard', 0, 'dl-key', 'other', 0, now())`, id).Error)

	done := make(chan error, 1)
	var rec inventory.Receipt
	go func() {
		var err error
		rec, err = s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: id, Quantity: 2, IdempotencyKey: "dl-key"})
		done <- err
	}()
	waitingBackend(t, other, `INSERT INTO "orders"`) // the purchase holds the row, waits for the key
	// Now t1 asks for the row: a cycle. The purchase is the victim; t1's UPDATE then proceeds.
	require.NoError(t, t1.Exec("UPDATE items SET name = name WHERE id = ?", id).Error)
	require.NoError(t, t1.Rollback().Error)
	close(t1Done)

	require.NoError(t, <-done, "the deadlock victim was retried once and succeeded")
	assert.EqualValues(t, 2, attempts.Load(), "one retry")
	assert.False(t, rec.Replayed)
	assert.Equal(t, 8, rec.Remaining)
	st := statsOf(t, s, id)
	assert.Equal(t, 8, st.Stock)
	assert.Equal(t, 1, st.OrderCount)
	require.Eventually(t, func() bool { return deadlocks() == before+1 }, 5*time.Second, 20*time.Millisecond,
		"PostgreSQL counted the deadlock")
}

// PostgreSQL dies (immediate shutdown, as in a crash) in the middle of a stream of purchases
// and comes back. Every purchase is answered: a receipt, or 503 unavailable (refused, lost, or
// a commit whose answer was lost: outcome unknown). Clients replay each 503 with its
// Idempotency-Key once the server is back: a purchase that had committed is replayed, one that
// had not is made now. In the end, every key answered with a receipt holds exactly one order,
// and the stock adds up.
func TestPostgresCrashMidStreamResolvedByReplay(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	db, _ := openDB(t, postgresBackend)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	const stock = 1000
	id := resetItems(t, s, stock)[0]
	srv := dbs.PG.Server(t)

	const workers, perWorker = 8, 60
	var (
		wg        sync.WaitGroup
		ok        atomic.Int64
		mu        sync.Mutex
		unknown   []inventory.PurchaseRequest // answered 503
		unexpects []error
		killed    = make(chan struct{})
		once      sync.Once
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				req := inventory.PurchaseRequest{ItemID: id, Quantity: 1, IdempotencyKey: fmt.Sprintf("crash-%d-%d", w, i)}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := s.Purchase(ctx, req)
				cancel()
				switch {
				case err == nil:
					if ok.Add(1) == 40 {
						once.Do(func() { srv.Kill(); close(killed) })
					}
				case errors.Is(err, inventory.ErrUnavailable):
					mu.Lock()
					unknown = append(unknown, req)
					mu.Unlock()
				default:
					mu.Lock()
					unexpects = append(unexpects, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("the server was never killed: fewer than 40 purchases succeeded")
	}
	require.Empty(t, unexpects, "every answer is a receipt or 503 unavailable")
	require.NotEmpty(t, unknown, "purchases ran into the dead server")
	require.NoError(t, srv.Restart())

	// The clients retry their 503s with the same key.
	replayed := 0
	for _, req := range unknown {
		var (
			rec inventory.Receipt
			err error
		)
		for attempt := 0; attempt < 50; attempt++ { // the pool drops its dead connections
			if rec, err = s.Purchase(t.Context(), req); !errors.Is(err, inventory.ErrUnavailable) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, err, "retry of %s", req.IdempotencyKey)
		ok.Add(1)
		if rec.Replayed {
			replayed++
		}
	}
	t.Logf("%d purchases answered 503 around the crash; on retry %d were replays of a commit that had happened", len(unknown), replayed)

	st := statsOf(t, s, id)
	assert.EqualValues(t, ok.Load(), st.OrderCount, "one order per key answered with a receipt")
	assert.EqualValues(t, ok.Load(), st.SoldUnits)
	assert.Equal(t, stock, st.Stock+st.SoldUnits, "the stock adds up: nothing half-written")
	assert.EqualValues(t, workers*perWorker, st.OrderCount, "every purchase, answered at once or on retry, is one order")
}

// The coalesced write of lock+guard (one transaction per hold, hand-written SQL) has the same
// deadline: a hold whose guarded update waits behind another transaction's row lock gives up
// at Config.WriteTimeout, every buyer of the batch gets ErrUnavailable, nothing is written;
// and a connection lost in the middle of it is ErrUnavailable too, rolled back by the server.
func TestPostgresCoalescedWriteDeadlineAndLostConnection(t *testing.T) {
	testutil.SkipShort(t, testutil.Postgres)
	srv := redistest.Start(t)
	db, dsn := openDB(t, postgresBackend)
	rdb := warmClient(t, srv)
	lc := locking.New(rdb, &locking.Options{KeyPrefix: lockPrefix})
	t.Cleanup(func() { _ = lc.Close() })
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), WriteTimeout: 300 * time.Millisecond})
	id := resetItems(t, s, 10)[0]
	other := openPath(t, dsn)

	buyAllFrom := func(s *inventory.Service, keys ...string) []error {
		errs := make([]error, len(keys))
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: id, Quantity: 1,
					Strategy: inventory.StrategyLockGuard, IdempotencyKey: k})
			}()
		}
		wg.Wait()
		return errs
	}
	buyAll := func(keys ...string) []error { return buyAllFrom(s, keys...) }
	// The lost connection: a storefront whose write deadline is far off, so that its update
	// waits on the row lock until the test finds its backend and ends it (under
	// WriteTimeout's 300ms, a loaded machine could miss the wait: a run of make test did).
	patient := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), WriteTimeout: time.Minute})

	holder := other.Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec("SELECT id FROM items WHERE id = ? FOR UPDATE", id).Error)
	start := time.Now()
	for _, err := range buyAll("d-1", "d-2", "d-3") {
		assert.ErrorIs(t, err, inventory.ErrUnavailable)
		assert.ErrorContains(t, err, "deadline")
	}
	assert.Less(t, time.Since(start), 4*time.Second, "the deadline, not the 5s statement timeout, ended it")
	require.NoError(t, holder.Rollback().Error)
	st := statsOf(t, s, id)
	assert.Equal(t, 10, st.Stock, "nothing written")
	assert.Zero(t, st.OrderCount, "the batch's inserted orders were rolled back with it")

	holder = other.Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec("SELECT id FROM items WHERE id = ? FOR UPDATE", id).Error)
	done := make(chan []error, 1)
	go func() { done <- buyAllFrom(patient, "l-1", "l-2") }()
	pid := waitingBackend(t, other, "UPDATE items")
	require.NoError(t, other.Exec("SELECT pg_terminate_backend(?)", pid).Error)
	for _, err := range <-done {
		assert.ErrorIs(t, err, inventory.ErrUnavailable)
	}
	require.NoError(t, holder.Rollback().Error)
	st = statsOf(t, s, id)
	assert.Equal(t, 10, st.Stock, "nothing written")
	assert.Zero(t, st.OrderCount)

	for _, err := range buyAll("d-1", "l-1", "l-2") {
		require.NoError(t, err, "the clients' retries with their keys succeed")
	}
	assert.Equal(t, 7, statsOf(t, s, id).Stock)
}
