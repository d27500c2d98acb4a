package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// strategyClass is how a strategy stands up to the faults, learned from what the server says
// of it (GET /api/strategies: safe, takes_lock, demo_only, redis_key_prefix), never from its
// name.
type strategyClass string

// The strategy classes.
const (
	// classSafe never oversells, even when a lock is lost (the server's safe).
	classSafe strategyClass = "safe"
	// classLock takes the storefront's own lock, whose watchdog renews the lease and declares
	// its loss, and writes without a guard: it holds unless the lock is lost unnoticed.
	classLock strategyClass = "lock"
	// classDemoLock takes one of the demo's broken locks (no watchdog): it holds only when
	// nothing goes wrong.
	classDemoLock strategyClass = "demo lock"
	// classMirror takes no lock and sells from a copy of the stock kept in Redis under its own
	// keys: it holds unless Redis loses its latest writes.
	classMirror strategyClass = "redis stock"
	// classUnprotected has nothing that holds across processes: it may oversell in any
	// setting (in one process some of these hold, which the server does not tell apart).
	classUnprotected strategyClass = "unprotected"
)

// classOf returns the class of the strategy the server describes as s.
func classOf(s storeapi.Strategy) strategyClass {
	switch {
	case s.Safe:
		return classSafe
	case s.TakesLock && s.DemoOnly:
		return classDemoLock
	case s.TakesLock:
		return classLock
	case s.RedisKeyPrefix != "":
		return classMirror
	}
	return classUnprotected
}

// The chaos modes, by -chaos name.
const (
	chaosNone      = ""
	chaosPause     = "pause"
	chaosFailover  = "failover"
	chaosPartition = "partition"
	chaosLatency   = "latency"
	chaosClock     = "clock"
	chaosMix       = "mix"
	chaosRedisHang = "redis-hang"
	chaosDBHang    = "db-hang"
)

// chaosMode is one fault the load test can bring to every strategy's run: what it does, what it
// needs, and which strategy classes are expected to stay SAFE under it.
type chaosMode struct {
	name string
	help string // what it does (the -chaos help text)
	// redis is the Redis topology of the cluster the fault needs (ClusterConfig.Redis).
	redis string
	// safe are the classes expected to keep every invariant under the fault.
	safe []strategyClass
	// lockOnly: the run compares by default only the strategies that take the storefront's
	// lock (the fault hits a lock holder and nothing else).
	lockOnly bool
	// inject brings the fault during one strategy's run (chaos.run); nil for a mode that
	// runs each strategy a second time with the fault instead (second).
	inject func(c *chaos, ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent
	// second, when set, runs every strategy a second time under the fault it applies to the
	// cluster and returns a function that removes it, with a label for that run.
	second func(cfg Config, cl *Cluster) (label string, undo func(), err error)
	// stopsHolder: the fault stops a process for a while; requests to it must outlive that.
	stopsHolder bool
	// keepSelling: the run goes on until a purchase sent after the fault is sold (the fault
	// takes a few seconds whose end the run must reach to show selling resumed).
	keepSelling bool
	// tokensReissued: the fault can make Redis issue a fencing token a second time (a promoted
	// replica that missed the latest ones), and the next holder is read from the orders too.
	tokensReissued bool
	// watchesLoss: the fault leaves the holder running, and the run records when its
	// watchdog declared the lock's loss and when the next holder took it.
	watchesLoss bool
	// defaults adjusts the flags not given on the command line (set) to the fault.
	defaults func(c *Config, set map[string]bool)
	// args are more flags for every instance under the fault (nil: none).
	args func(c Config) []string
	// replicatedSafe, when set, replaces safe when the instances run with --lock-replicas
	// (-lock-replicas).
	replicatedSafe []strategyClass
	// judge, when set, computes the fault's figures of a strategy's run from its purchases
	// (takesLock: the strategy takes a Redis lock) and returns the targets it missed, which
	// fail the run.
	judge func(cfg Config, res *StrategyResult, start time.Time, purchases []*purchase, takesLock bool) []string
}

// noChaos is the setting without a fault.
var noChaos = chaosMode{name: chaosNone, safe: []strategyClass{classSafe, classLock, classDemoLock, classMirror}}

// chaosModes are the -chaos faults, in the order of the help text.
var chaosModes = []chaosMode{
	{
		name:        chaosPause,
		help:        "SIGSTOPs the instance holding the hot item's lock for 3x the lease (any serving instance for a strategy without a lock)",
		safe:        []strategyClass{classSafe, classMirror},
		inject:      (*chaos).pauseHolder,
		stopsHolder: true,
		defaults: func(c *Config, set map[string]bool) {
			faultDuration(c, set, 3*c.Lease+4*time.Second) // long enough to sell during the pause and after it
			if !set["stock"] {
				// Small enough for the hot item to sell out during the pause, so that a stale
				// write of the paused holder, once resumed, puts back stock that is then sold
				// a second time.
				c.Stock = 50
			}
		},
	},
	{
		name:           chaosFailover,
		help:           "runs Redis under Sentinel and fails it over so that the promoted replica misses the hot lock (with -lock-replicas 1: has it)",
		redis:          TopologySentinel,
		safe:           []strategyClass{classSafe},
		replicatedSafe: []strategyClass{classSafe, classLock}, // the promoted replica acknowledged the lock: lock keeps it
		lockOnly:       true,
		inject:         (*chaos).failover,
		stopsHolder:    true,
		keepSelling:    true,
		tokensReissued: true,
		defaults: func(c *Config, set map[string]bool) {
			// Finding a holder, the failover (~1.3s) and the next holder take a few seconds;
			// the run goes on after them to show selling resumed.
			faultDuration(c, set, 10*time.Second)
			if !set["stock"] {
				// Enough for the hot item not to sell out before the stale holder resumes:
				// its write then lands on stock others have sold since (a lost update under lock).
				c.Stock = 1000
			}
			if c.LockReplicas > 0 && !set["lease"] {
				// The lock must outlive the failover on the promoted replica (the holder is
				// stopped meanwhile and renews nothing): a lease well above its ~1.3s.
				c.Lease = 10 * time.Second
			}
		},
		args: func(c Config) []string {
			if c.LockReplicas == 0 {
				return nil
			}
			return []string{"--lock-replicas", strconv.Itoa(c.LockReplicas)}
		},
	},
	{
		name:        chaosPartition,
		help:        "black-holes the lock holder's link to Redis for 3x the lease",
		redis:       TopologyProxied,
		safe:        []strategyClass{classSafe, classLock, classMirror},
		lockOnly:    true,
		inject:      (*chaos).partition,
		watchesLoss: true,
		defaults: func(c *Config, set map[string]bool) {
			// The cut must catch the holder in the middle of its work and leave it there past
			// the lease: a short lease and a work twice as long (the watchdog renews the lease
			// meanwhile).
			if !set["lease"] {
				c.Lease = 400 * time.Millisecond
			}
			if !set["work"] {
				c.Work = min(2*c.Lease, time.Second)
			}
			faultDuration(c, set, 3*c.Lease+4*time.Second)
		},
	},
	{
		name:     chaosLatency,
		help:     "runs each strategy twice, the second time with -latency on every link to Redis",
		redis:    TopologyProxied,
		safe:     []strategyClass{classSafe, classLock, classMirror},
		lockOnly: true,
		second:   addLatency,
	},
	{
		name:        chaosClock,
		help:        "steps Redis's wall clock forward past the lease while the hot lock's holder works (keys expire early)",
		redis:       TopologyClock,
		safe:        []strategyClass{classSafe},
		lockOnly:    true,
		inject:      (*chaos).clockJump,
		watchesLoss: true,
		defaults: func(c *Config, set map[string]bool) {
			// A work shorter than the watchdog's renewal interval (a third of the lease): the
			// holder whose key expired finishes its work and writes before its watchdog's next
			// renewal finds the lock gone.
			if !set["work"] {
				c.Work = c.Lease / 5
			}
			faultDuration(c, set, time.Duration(clockJumps+2)*c.Lease+2*time.Second)
		},
	},
	{
		name: chaosMix,
		help: "one fault every -mix-gap to twice it, going round every kind in a random order per round: pause an instance past its lease, " +
			"kill -9 an instance and start it again, kill -9 redis-server and restart it empty or from a snapshot, a flapping partition " +
			"of an instance's link, slow links, Redis's clock stepped past the lease, and with -db postgres a crash restart of PostgreSQL; " +
			"a kind never fired fails the run (mix.go)",
		redis:       TopologyMix,
		safe:        []strategyClass{classSafe},
		inject:      (*chaos).mix,
		judge:       judgeMix,
		stopsHolder: true,
		defaults: func(c *Config, set map[string]bool) {
			// Two rounds of every kind at the default lease and gap.
			faultDuration(c, set, time.Minute)
			if !set["stock"] {
				// Stock that lasts the run: the faults land while the hot lock is wanted.
				c.Stock = 1_000_000
			}
			if !set["check-timeout"] {
				// A minute of faults leaves thousands of operations of unknown outcome (lost
				// answers), which Porcupine must place both ways: 30s is too short for them.
				c.CheckTimeout = 2 * time.Minute
			}
		},
	},
	{
		name:     chaosRedisHang,
		help:     "SIGSTOPs the redis-server for -hang-for after 3s, then SIGCONT; the instances run with --on-redis-down from -on-redis-down; reports healthy vs hung req/s and p99, 5xx, degraded sales, locked sales back, and a verdict",
		safe:     []strategyClass{classSafe},
		inject:   (*chaos).hangRedisServer,
		judge:    judgeHang,
		defaults: hangDefaults,
		args: func(c Config) []string {
			return []string{"--on-redis-down", c.OnRedisDown}
		},
	},
	{
		name:     chaosDBHang,
		help:     "with -db postgres: SIGSTOPs the postmaster and every backend for -hang-for after 3s, then SIGCONT; the instances run with --max-purchases from -max-purchases; reports the at_capacity answers, the in-flight bound, and when selling resumed",
		safe:     []strategyClass{classSafe},
		inject:   (*chaos).hangPostgresServer,
		judge:    judgeHang,
		defaults: hangDefaults,
		args: func(c Config) []string {
			return []string{"--max-purchases", strconv.Itoa(c.MaxPurchases)}
		},
	},
}

// hangDefaults fits the run to a hang: the healthy window, the hang and the recovery; stock
// that does not sell out; the storefront's default lease; under db-hang more clients than the
// instances admit; a client timeout that outlives the hang.
func hangDefaults(c *Config, set map[string]bool) {
	faultDuration(c, set, hangWarmUp+hangHealthy+hangGap+c.HangFor+hangAfter)
	if !set["stock"] {
		c.Stock = 1_000_000
	}
	if !set["lease"] {
		// The storefront's own default (the demo's 1s lease is renewed every third of a
		// second, and a renewal late on a loaded machine opens the breaker on a healthy Redis).
		c.Lease = 30 * time.Second
	}
	if c.Chaos == chaosDBHang && !set["concurrency"] {
		c.Concurrency = 2 * c.MaxPurchases * max(c.Instances, 1)
	}
	if !set["timeout"] {
		c.Timeout = max(c.Timeout, c.HangFor+5*time.Second)
	}
}

// faultDuration makes the run last d when neither -duration nor -requests bounds it.
func faultDuration(c *Config, set map[string]bool, d time.Duration) {
	if !set["duration"] && !set["requests"] {
		c.Requests, c.Duration = 0, d
	}
}

// modeOf returns the chaos mode of that -chaos name ("" and "none": no fault).
func modeOf(name string) (chaosMode, bool) {
	if name == chaosNone || name == "none" {
		return noChaos, true
	}
	for _, m := range chaosModes {
		if m.name == name {
			return m, true
		}
	}
	return chaosMode{}, false
}

// mode returns the chaos mode of the configuration (validate has checked the name).
func (c *Config) mode() chaosMode {
	m, _ := modeOf(c.Chaos)
	if c.LockReplicas > 0 && m.replicatedSafe != nil {
		m.safe = m.replicatedSafe
	}
	return m
}

// chaosNames lists the -chaos names, for messages.
func chaosNames() string {
	names := make([]string, len(chaosModes))
	for i, m := range chaosModes {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}

// lockOnlyChaos names the modes that compare by default only the strategies that take a lock.
func lockOnlyChaos() string {
	var names []string
	for _, m := range chaosModes {
		if m.lockOnly {
			names = append(names, m.name)
		}
	}
	return strings.Join(names, ", ")
}

// chaosHelp is the -chaos help text: one line per mode.
func chaosHelp() string {
	lines := []string{"during each strategy's run (none: no fault):"}
	for _, m := range chaosModes {
		lines = append(lines, fmt.Sprintf("%q %s", m.name, m.help))
	}
	return strings.Join(lines, "\n")
}

// expectSafe reports whether a strategy of class is expected to keep every invariant under m.
func (m chaosMode) expectSafe(class strategyClass) bool { return slices.Contains(m.safe, class) }

// defaultStrategies picks the strategies a run compares when -strategies is not given: every
// strategy the server offers outside demo mode (those that take a lock, when the fault hits a
// lock holder).
func (m chaosMode) defaultStrategies(offered []storeapi.Strategy) []string {
	var out []string
	for _, s := range offered {
		if !s.DemoOnly && (!m.lockOnly || s.TakesLock) {
			out = append(out, s.Name)
		}
	}
	return out
}

// checkTopology tells whether the cluster runs the Redis topology the mode needs.
func (m chaosMode) checkTopology(cl *Cluster) error {
	switch {
	case m.redis == TopologySentinel && cl.Sentinel == nil:
		return usageErr("-chaos %s needs the instances behind Sentinel (start the cluster with Redis: %q)", m.name, TopologySentinel)
	case m.redis == TopologyProxied && len(cl.Links) != len(cl.Instances):
		return usageErr("-chaos %s needs one proxy per instance (start the cluster with Redis: %q)", m.name, TopologyProxied)
	case m.redis == TopologyMix && (cl.Clock == nil || len(cl.Links) != len(cl.Instances) || cl.Redis == nil):
		return usageErr("-chaos %s needs a redis-server whose clock it can step behind one proxy per instance (start the cluster with Redis: %q)", m.name, TopologyMix)
	case m.redis == TopologyClock && cl.Clock == nil:
		return usageErr("-chaos %s needs a redis-server whose clock it can step (start the cluster with Redis: %q)", m.name, TopologyClock)
	case m.redis == "" && m.name != chaosNone && cl.Redis == nil:
		return usageErr("-chaos %s needs a single Redis", m.name)
	}
	return nil
}

// addLatency adds cfg.Latency to each direction of every instance's link to Redis.
func addLatency(cfg Config, cl *Cluster) (string, func(), error) {
	undo := func() {
		for _, l := range cl.Links {
			_ = l.Heal()
		}
	}
	for _, l := range cl.Links {
		if err := l.Latency(cfg.Latency); err != nil {
			undo()
			return "", nil, err
		}
	}
	return fmt.Sprintf(" +%s", cfg.Latency), undo, nil
}
