package fault

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
)

// The chaos modes, by -chaos name.
const (
	ChaosNone      = ""
	ChaosPause     = "pause"
	ChaosFailover  = "failover"
	ChaosPartition = "partition"
	ChaosLatency   = "latency"
	ChaosClock     = "clock"
	ChaosMix       = "mix"
	ChaosRedisHang = "redis-hang"
	ChaosDBHang    = "db-hang"
	ChaosKill      = "kill"
)

// Mode is one fault the load test can bring to every strategy's run: what it does, what it
// needs, and which strategy classes are expected to stay SAFE under it.
type Mode struct {
	Name string
	Help string // what it does (the -chaos help text)
	// Topology is the Redis topology of the cluster the fault needs (cluster.Config.Redis).
	Topology string
	// Safe are the classes expected to keep every invariant under the fault.
	Safe []Class
	// LockOnly: the run compares by default only the strategies that take the storefront's
	// lock (the fault hits a lock holder and nothing else).
	LockOnly bool
	// Fault is the fault brought during each strategy's run (Chaos.Bring); nil for no fault
	// and for a mode that runs each strategy a second time with the fault instead (Second).
	Fault Fault
	// Second, when set, runs every strategy a second time under the fault it applies to the
	// cluster and returns a function that removes it, with a label for that run.
	Second func(cfg config.Config, cl *cluster.Cluster) (label string, undo func(), err error)
	// StopsHolder: the fault stops a process for a while; requests to it must outlive that.
	StopsHolder bool
	// KeepSelling: the run goes on until a purchase sent after the fault is sold (the fault
	// takes a few seconds whose end the run must reach to show selling resumed).
	KeepSelling bool
	// tokensReissued: the fault can make Redis issue a fencing token a second time (a promoted
	// replica that missed the latest ones), and the next holder is read from the orders too.
	tokensReissued bool
	// watchesLoss: the fault leaves the holder running, and the run records when its
	// watchdog declared the lock's loss and when the next holder took it.
	watchesLoss bool
	// Defaults adjusts the flags not given on the command line (set) to the fault.
	Defaults func(c *config.Config, set map[string]bool)
	// Args are more flags for every instance under the fault (nil: none).
	Args func(c config.Config) []string
	// replicatedSafe, when set, replaces safe when the instances run with --lock-replicas
	// (-lock-replicas).
	replicatedSafe []Class
	// Judge, when set, computes the fault's figures of a strategy's run from its purchases
	// (takesLock: the strategy takes a Redis lock) and returns the targets it missed, which
	// fail the run.
	Judge func(cfg config.Config, res *Outcome, start time.Time, purchases []*client.Purchase, takesLock bool) []string
}

// noChaos is the setting without a fault.
var noChaos = Mode{Name: ChaosNone, Safe: []Class{ClassSafe, ClassLock, ClassDemoLock, ClassMirror}}

// chaosModes are the -chaos faults, in the order of the help text.
var chaosModes = []Mode{
	{
		Name:        ChaosPause,
		Help:        "SIGSTOPs the instance holding the hot item's lock for 3x the lease (any serving instance for a strategy without a lock)",
		Safe:        []Class{ClassSafe, ClassMirror},
		Fault:       modeFault{name: ChaosPause, topology: "", inject: (*Chaos).pauseHolder},
		StopsHolder: true,
		Defaults: func(c *config.Config, set map[string]bool) {
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
		Name:           ChaosFailover,
		Help:           "runs Redis under Sentinel and fails it over so that the promoted replica misses the hot lock (with -lock-replicas 1: has it)",
		Topology:       cluster.TopologySentinel,
		Safe:           []Class{ClassSafe},
		replicatedSafe: []Class{ClassSafe, ClassLock}, // the promoted replica acknowledged the lock: lock keeps it
		LockOnly:       true,
		Fault:          modeFault{name: ChaosFailover, topology: cluster.TopologySentinel, inject: (*Chaos).failover},
		StopsHolder:    true,
		KeepSelling:    true,
		tokensReissued: true,
		Defaults: func(c *config.Config, set map[string]bool) {
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
		Args: func(c config.Config) []string {
			if c.LockReplicas == 0 {
				return nil
			}
			return []string{"--lock-replicas", strconv.Itoa(c.LockReplicas)}
		},
	},
	{
		Name:        ChaosPartition,
		Help:        "black-holes the lock holder's link to Redis for 3x the lease",
		Topology:    cluster.TopologyProxied,
		Safe:        []Class{ClassSafe, ClassLock, ClassMirror},
		LockOnly:    true,
		Fault:       modeFault{name: ChaosPartition, topology: cluster.TopologyProxied, inject: (*Chaos).partition},
		watchesLoss: true,
		Defaults: func(c *config.Config, set map[string]bool) {
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
		Name:     ChaosLatency,
		Help:     "runs each strategy twice, the second time with -latency on every link to Redis",
		Topology: cluster.TopologyProxied,
		Safe:     []Class{ClassSafe, ClassLock, ClassMirror},
		LockOnly: true,
		Second:   addLatency,
	},
	{
		Name:        ChaosClock,
		Help:        "steps Redis's wall clock forward past the lease while the hot lock's holder works (keys expire early)",
		Topology:    cluster.TopologyClock,
		Safe:        []Class{ClassSafe},
		LockOnly:    true,
		Fault:       modeFault{name: ChaosClock, topology: cluster.TopologyClock, inject: (*Chaos).clockJump},
		watchesLoss: true,
		Defaults: func(c *config.Config, set map[string]bool) {
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
		Name: ChaosMix,
		Help: "one fault every -mix-gap to twice it, going round every kind in a random order per round: pause an instance past its lease, " +
			"kill -9 an instance and start it again, kill -9 redis-server and restart it empty or from a snapshot, a flapping partition " +
			"of an instance's link, slow links, Redis's clock stepped past the lease, and with -db postgres a crash restart of PostgreSQL; " +
			"a kind never fired fails the run (mix.go)",
		Topology:    cluster.TopologyMix,
		Safe:        []Class{ClassSafe},
		Fault:       modeFault{name: ChaosMix, topology: cluster.TopologyMix, inject: (*Chaos).mix},
		Judge:       judgeMix,
		StopsHolder: true,
		Defaults: func(c *config.Config, set map[string]bool) {
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
		Name: ChaosKill,
		Help: "kill -9 the instance whose process holds the hot item's lock and start it again, -kills times, each once selling resumed; " +
			"reports each kill's sales gap (from the kill to the next 201 of the hot item on a survivor, the -threshold metric gap); " +
			"the storefront's production lease (30s) unless -lease is given (kill.go)",
		Safe:     []Class{ClassSafe, ClassLock}, // a dead holder writes nothing: lock waits out its lease, and sells nothing twice
		LockOnly: true,
		Fault:    modeFault{name: ChaosKill, topology: "", inject: (*Chaos).killHolders},
		Judge:    judgeKill,
		Defaults: func(c *config.Config, set map[string]bool) {
			// The run goes on past its duration until the kills are done (Target.Rounds).
			faultDuration(c, set, 5*time.Second)
			if !set["stock"] {
				c.Stock = 1_000_000 // stock that lasts every kill
			}
			if !set["lease"] {
				c.Lease = 30 * time.Second // the storefront's own default (its --lock-wait stays 5s)
			}
			if !set["check-timeout"] {
				// Every request that died with a killed instance is of unknown outcome, which
				// Porcupine must place both ways.
				c.CheckTimeout = 2 * time.Minute
			}
		},
	},
	{
		Name:     ChaosRedisHang,
		Help:     "SIGSTOPs the redis-server for -hang-for after 3s, then SIGCONT; the instances run with --on-redis-down from -on-redis-down; reports healthy vs hung req/s and p99, 5xx, degraded sales, locked sales back, and a verdict",
		Safe:     []Class{ClassSafe},
		Fault:    modeFault{name: ChaosRedisHang, topology: "", inject: (*Chaos).hangRedisServer},
		Judge:    judgeHang,
		Defaults: hangDefaults,
		Args: func(c config.Config) []string {
			return []string{"--on-redis-down", c.OnRedisDown}
		},
	},
	{
		Name:     ChaosDBHang,
		Help:     "with -db postgres: SIGSTOPs the postmaster and every backend for -hang-for after 3s, then SIGCONT; the instances run with --max-purchases from -max-purchases; reports the at_capacity answers, the in-flight bound, and when selling resumed",
		Safe:     []Class{ClassSafe},
		Fault:    modeFault{name: ChaosDBHang, topology: "", inject: (*Chaos).hangPostgresServer},
		Judge:    judgeHang,
		Defaults: hangDefaults,
		Args: func(c config.Config) []string {
			return []string{"--max-purchases", strconv.Itoa(c.MaxPurchases)}
		},
	},
}

// hangDefaults fits the run to a hang: the healthy window, the hang and the recovery; stock
// that does not sell out; the storefront's default lease; under db-hang more clients than the
// instances admit; a client timeout that outlives the hang.
func hangDefaults(c *config.Config, set map[string]bool) {
	faultDuration(c, set, HangRunLength(c.HangFor))
	if !set["stock"] {
		c.Stock = 1_000_000
	}
	if !set["lease"] {
		// The storefront's own default (the demo's 1s lease is renewed every third of a
		// second, and a renewal late on a loaded machine opens the breaker on a healthy Redis).
		c.Lease = 30 * time.Second
	}
	if c.Chaos == ChaosDBHang && !set["concurrency"] {
		c.Concurrency = 2 * c.MaxPurchases * max(c.Instances, 1)
	}
	if !set["timeout"] {
		c.Timeout = max(c.Timeout, c.HangFor+5*time.Second)
	}
}

// faultDuration makes the run last d when neither -duration nor -requests bounds it.
func faultDuration(c *config.Config, set map[string]bool, d time.Duration) {
	if !set["duration"] && !set["requests"] {
		c.Requests, c.Duration = 0, d
	}
}

// ModeOf returns the chaos mode of that -chaos name ("" and "none": no fault).
func ModeOf(name string) (Mode, bool) {
	if name == ChaosNone || name == "none" {
		return noChaos, true
	}
	for _, m := range chaosModes {
		if m.Name == name {
			return m, true
		}
	}
	return Mode{}, false
}

// ModeFor returns the chaos mode of the configuration (validated: its -chaos name is known),
// with the classes expected SAFE under -lock-replicas.
func ModeFor(c config.Config) Mode {
	m, _ := ModeOf(c.Chaos)
	if c.LockReplicas > 0 && m.replicatedSafe != nil {
		m.Safe = m.replicatedSafe
	}
	return m
}

// Names lists the -chaos names, for messages.
func Names() string {
	names := make([]string, len(chaosModes))
	for i, m := range chaosModes {
		names[i] = m.Name
	}
	return strings.Join(names, ", ")
}

// LockOnlyNames names the modes that compare by default only the strategies that take a lock.
func LockOnlyNames() string {
	var names []string
	for _, m := range chaosModes {
		if m.LockOnly {
			names = append(names, m.Name)
		}
	}
	return strings.Join(names, ", ")
}

// Help is the -chaos help text: one line per mode.
func Help() string {
	lines := []string{"during each strategy's run (none: no fault):"}
	for _, m := range chaosModes {
		lines = append(lines, fmt.Sprintf("%q %s", m.Name, m.Help))
	}
	return strings.Join(lines, "\n")
}

// ExpectSafe reports whether a strategy of class is expected to keep every invariant under m.
func (m Mode) ExpectSafe(class Class) bool { return slices.Contains(m.Safe, class) }

// DefaultStrategies picks the strategies a run compares when -strategies is not given: every
// strategy the server offers outside demo mode (those that take a lock, when the fault hits a
// lock holder).
func (m Mode) DefaultStrategies(offered []storeapi.Strategy) []string {
	var out []string
	for _, s := range offered {
		if !s.DemoOnly && (!m.LockOnly || s.TakesLock) {
			out = append(out, s.Name)
		}
	}
	return out
}

// Check tells whether the cluster runs the Redis topology the mode needs.
func (m Mode) Check(cl *cluster.Cluster) error {
	if m.Fault != nil {
		return m.Fault.Available(cl)
	}
	return checkTopology(m.Name, m.Topology, cl)
}

// checkTopology tells whether the cluster runs topology, which the -chaos mode name needs.
func checkTopology(name, topology string, cl *cluster.Cluster) error {
	switch {
	case topology == cluster.TopologySentinel && cl.Sentinel == nil:
		return fmt.Errorf("-chaos %s needs the instances behind Sentinel (start the cluster with Redis: %q)", name, cluster.TopologySentinel)
	case topology == cluster.TopologyProxied && len(cl.Links) != len(cl.Instances):
		return fmt.Errorf("-chaos %s needs one proxy per instance (start the cluster with Redis: %q)", name, cluster.TopologyProxied)
	case topology == cluster.TopologyMix && (cl.Clock == nil || len(cl.Links) != len(cl.Instances) || cl.Redis == nil):
		return fmt.Errorf("-chaos %s needs a redis-server whose clock it can step behind one proxy per instance (start the cluster with Redis: %q)", name, cluster.TopologyMix)
	case topology == cluster.TopologyClock && cl.Clock == nil:
		return fmt.Errorf("-chaos %s needs a redis-server whose clock it can step (start the cluster with Redis: %q)", name, cluster.TopologyClock)
	case topology == "" && name != ChaosNone && cl.Redis == nil:
		return fmt.Errorf("-chaos %s needs a single Redis", name)
	}
	return nil
}

// addLatency adds cfg.Latency to each direction of every instance's link to Redis.
func addLatency(cfg config.Config, cl *cluster.Cluster) (string, func(), error) {
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
