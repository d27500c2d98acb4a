package fault

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// TestExpectedSafe: what a run expects of a strategy follows from what the server says of it
// (safe, takes_lock, demo_only, redis_key_prefix) and the chaos mode's table.
func TestExpectedSafe(t *testing.T) {
	described := map[string]storeapi.Strategy{
		"naive":             {Name: "naive"},
		"local":             {Name: "local"},
		"lock":              {Name: "lock", TakesLock: true},
		"guard":             {Name: "guard", Safe: true},
		"lock+guard":        {Name: "lock+guard", Safe: true, TakesLock: true},
		"fixed-lease":       {Name: "fixed-lease", TakesLock: true, DemoOnly: true, RedisKeyPrefix: "p:fixed-lease:"},
		"optimistic":        {Name: "optimistic", Safe: true, DemoOnly: true},
		"redis-stock":       {Name: "redis-stock", DemoOnly: true, RedisKeyPrefix: "p:stock:"},
		"redis-stock+guard": {Name: "redis-stock+guard", Safe: true, DemoOnly: true, RedisKeyPrefix: "p:stock:"},
	}
	expect := func(strategy, chaos string) bool {
		m, ok := ModeOf(chaos)
		require.True(t, ok, chaos)
		return m.ExpectSafe(ClassOf(described[strategy]))
	}
	assert.False(t, expect("naive", ""))
	assert.False(t, expect("local", ""), "nothing holds across processes")
	assert.True(t, expect("lock", ""))
	assert.False(t, expect("lock", "pause"))
	assert.False(t, expect("lock", "failover"))
	assert.True(t, expect("lock", "partition"), "its watchdog declares the loss in time")
	assert.True(t, expect("lock", "latency"))
	assert.True(t, expect("guard", "pause"))
	assert.True(t, expect("lock+guard", "pause"))
	assert.True(t, expect("lock+guard", "failover"))
	assert.False(t, expect("fixed-lease", "pause"))
	assert.True(t, expect("fixed-lease", ""))
	assert.True(t, expect("redis-stock", ""))
	assert.True(t, expect("redis-stock+guard", "pause"))
	assert.True(t, expect("optimistic", "pause"))
	assert.False(t, expect("fixed-lease", "partition"), "no watchdog to declare the loss")
	assert.False(t, expect("redis-stock", "failover"), "a failover may lose the mirror's latest writes")
	assert.True(t, expect("redis-stock", "partition"))
	assert.True(t, expect("redis-stock+guard", "failover"))
	assert.Equal(t, ClassUnprotected, ClassOf(described["naive"]))
	assert.Equal(t, ClassMirror, ClassOf(described["redis-stock"]))
	assert.Equal(t, ClassDemoLock, ClassOf(described["fixed-lease"]))

	offered := make([]storeapi.Strategy, 0, len(described))
	for _, name := range []string{"naive", "local", "lock", "guard", "lock+guard", "fixed-lease", "optimistic"} {
		offered = append(offered, described[name])
	}
	assert.Equal(t, []string{"naive", "local", "lock", "guard", "lock+guard"}, noChaos.DefaultStrategies(offered),
		"every strategy offered outside demo mode")
	failover, _ := ModeOf(ChaosFailover)
	assert.Equal(t, []string{"lock", "lock+guard"}, failover.DefaultStrategies(offered), "those that take a lock")
	pause, _ := ModeOf(ChaosPause)
	assert.Equal(t, noChaos.DefaultStrategies(offered), pause.DefaultStrategies(offered), "a pause hits any serving instance")

}

// TestChaosHelp: the -chaos help and its error message come from the table of modes.
func TestChaosHelp(t *testing.T) {
	for _, m := range chaosModes {
		assert.Contains(t, Help(), fmt.Sprintf("%q %s", m.Name, m.Help))
		assert.NotEmpty(t, m.Safe, m.Name)
		assert.True(t, (m.Fault == nil) != (m.Second == nil), "%s: a fault during the run or a second run under it", m.Name)
		if f, ok := m.Fault.(modeFault); ok {
			assert.Equal(t, m.Name, f.Name(), "the mode's fault is named after it")
			assert.Equal(t, m.Topology, f.topology, "%s: the fault needs the topology the mode starts", m.Name)
		}
	}
}
