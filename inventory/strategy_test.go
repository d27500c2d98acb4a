package inventory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/inventory"
)

const (
	burstSize  = 200
	burstStock = 100
)

func TestGuardNeverOversells(t *testing.T) { forEachBackend(t, testGuardNeverOversells) }

func testGuardNeverOversells(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db})
	id := resetItems(t, s, burstStock)[0]

	o := burst(t, []*inventory.Service{s}, inventory.StrategyGuard, id, burstSize, time.Millisecond)
	assertSafe(t, s, id, o)
	assert.Less(t, statsOf(t, s, id).Stock, 3, "demand exceeds stock: (almost) everything is sold")
	t.Logf("guard: %d ok, %d units, errors %v", o.ok, o.units, o.errs)
}

// naive with a work delay between its read and its write oversells: the demo must show it.
func TestNaiveOversells(t *testing.T) { forEachBackend(t, testNaiveOversells) }

func testNaiveOversells(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db})
	id := resetItems(t, s, burstStock)[0]

	o := burst(t, []*inventory.Service{s}, inventory.StrategyNaive, id, burstSize, 20*time.Millisecond)
	st := statsOf(t, s, id)
	assert.GreaterOrEqual(t, st.Stock, 0, "its write never goes negative, it loses updates instead")
	assert.Positive(t, st.OversoldUnits, "naive must oversell under concurrency")
	assert.Greater(t, st.SoldUnits, st.InitialStock-st.Stock, "lost updates")
	t.Logf("naive: %d ok, %d units sold of %d, oversold %d", o.ok, o.units, st.InitialStock, st.OversoldUnits)
}

// local is safe within one Service (one process)...
func TestLocalSafeInOneProcess(t *testing.T) { forEachBackend(t, testLocalSafeInOneProcess) }

func testLocalSafeInOneProcess(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db})
	id := resetItems(t, s, burstStock)[0]

	o := burst(t, []*inventory.Service{s}, inventory.StrategyLocal, id, burstSize, 2*time.Millisecond)
	assertSafe(t, s, id, o)
}

// ...and oversells through two Service instances on one database, standing for two processes
// (each with its own connection pool, as a second process would have).
func TestLocalOversellsAcrossProcesses(t *testing.T) {
	forEachBackend(t, testLocalOversellsAcrossProcesses)
}

func testLocalOversellsAcrossProcesses(t *testing.T, be backend) {
	db, path := openDB(t, be)
	a := newService(t, inventory.Config{DB: db})
	b := newService(t, inventory.Config{DB: openPath(t, path)})
	id := resetItems(t, a, burstStock)[0]

	o := burst(t, []*inventory.Service{a, b}, inventory.StrategyLocal, id, burstSize, 10*time.Millisecond)
	st := statsOf(t, a, id)
	assert.Positive(t, st.OversoldUnits, "two processes' mutexes do not exclude each other")
	t.Logf("local x2: %d ok, %d units sold of %d, oversold %d", o.ok, o.units, st.InitialStock, st.OversoldUnits)
}

// guard stays safe across processes: the database decides.
func TestGuardSafeAcrossProcesses(t *testing.T) { forEachBackend(t, testGuardSafeAcrossProcesses) }

func testGuardSafeAcrossProcesses(t *testing.T, be backend) {
	db, path := openDB(t, be)
	a := newService(t, inventory.Config{DB: db})
	b := newService(t, inventory.Config{DB: openPath(t, path)})
	id := resetItems(t, a, burstStock)[0]

	o := burst(t, []*inventory.Service{a, b}, inventory.StrategyGuard, id, burstSize, time.Millisecond)
	assertSafe(t, a, id, o)
}

func TestLockStrategiesWithoutLockerAreUnavailable(t *testing.T) {
	forEachBackend(t, testLockStrategiesWithoutLockerAreUnavailable)
}

func testLockStrategiesWithoutLockerAreUnavailable(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := newService(t, inventory.Config{DB: db, Default: inventory.StrategyGuard})
	id := resetItems(t, s, 10)[0]
	for _, name := range []string{inventory.StrategyLock, inventory.StrategyLockGuard} {
		_, err := s.Purchase(t.Context(), inventory.PurchaseRequest{ItemID: id, Quantity: 1, Strategy: name})
		assert.ErrorIs(t, err, inventory.ErrUnavailable, name)
	}
	assert.Equal(t, 10, statsOf(t, s, id).Stock)
}
