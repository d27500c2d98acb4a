// Package config is the load test's settings, as the flags give them (scenario.ParseConfig): the
// bottom layer, read by every package of the load test.
package config

import (
	"time"
)

// Config is everything one load test run needs. Build it with scenario.ParseConfig or by hand (tests).
type Config struct {
	Instances   int           // self-contained mode: storefront processes to start
	Targets     []string      // target mode: base URLs of running storefronts (loopback only)
	AdminToken  string        // target mode: the servers' admin token
	Bin         string        // self-contained mode: storefront binary; "" builds it
	DB          string        // self-contained mode: "sqlite" (a file), "postgres" (a private server) or a postgres:// URL
	Strategies  []string      // strategies to compare, in order; nil: the chaos mode's default among those the server offers
	Items       int           // catalogue size
	Stock       int           // initial stock of every item
	Requests    int           // purchases per strategy; 0 = bounded by Duration only
	Duration    time.Duration // run length per strategy; 0 = bounded by Requests only
	Concurrency int           // closed model: workers; open model: cap of requests in flight
	Rate        float64       // open model: purchases per second; 0 = closed model
	Quantity    int           // max units per purchase (uniform 1..Quantity)
	Hot         float64       // share of purchases on the first item
	Retry       float64       // share of purchases sent twice with the same Idempotency-Key (half at once)
	Work        time.Duration // X-Simulated-Work of every purchase
	Chaos       string        // a chaos mode's name (fault/modes.go), "" for none
	Latency     time.Duration // -chaos latency: delay of each direction of every instance's Redis link
	Lease       time.Duration // --lock-lease of the instances in chaos mode
	Timeout     time.Duration // client timeout of one HTTP request
	Seed        int64         // random seed of the workload; 0 picks one
	JSONFile    string        // write the JSON report there
	HTMLFile    string        // write the HTML report there
	Quiet       bool          // no progress output
	Scenario    string        // "" (the strategy comparison) or "pitfalls" (scenario/pitfalls.go)
	Perf        bool          // the same-run performance command instead of the comparison (scenario/perf.go)
	Rounds      int           // -perf: measured rounds of every target
	Routes      []string      // how purchases reach the instances (RouteRoundRobin, RouteItem): each strategy runs once per route
	// The checked history (checks/history.go).
	Reads        float64       // share of operations that read an item's stock, 0..0.9
	CheckTimeout time.Duration // bound of the linearizability check of one strategy's history; 0: not checked
	// The workload (workload/cart.go, workload/holds.go): WorkloadPurchase, WorkloadCart or WorkloadHolds.
	// Workload is the one being run; Workloads are those of -workload, run in turn (several only
	// under -chaos mix: each strategy runs each of them for Duration).
	Workload  string
	Workloads []string
	HoldTTL   time.Duration // -workload holds: the ttl of every hold
	// -workload cart: the share of its operations that are single purchases of the hot item
	// (POST /api/items/:id/purchase) among the checkouts, 0..1
	CartSingles float64
	// The open model and the thresholds (workload/openmodel.go, threshold.go).
	Spike      bool        // open model: the rate ramps from 0 to Rate in one second, then holds
	Thresholds []Threshold // -threshold: each strategy's run must meet them (else exit 3)

	// -chaos redis-hang and db-hang (fault/hang.go)
	HangFor      time.Duration // how long the process stays stopped
	OnRedisDown  string        // redis-hang: --on-redis-down of the instances (guard or fail)
	MaxPurchases int           // db-hang: --max-purchases of the instances
	StreamHold   time.Duration // self-contained mode: --stream-hold of the instances (0: their default)
	NoStream     bool          // self-contained mode: --stream-alone=false on the instances (holds sell in batches)

	MixGap    time.Duration // -chaos mix: the pause between two faults is drawn from [MixGap, 2*MixGap); 0: defaultMixGap
	MixRounds int           // -chaos mix: > 0 extends each strategy's run past Duration until that many full rounds of faults fired
	MixSkip   []string      // -chaos mix: fault kinds left out of the schedule (a soak without kill: storefronts that live the whole run)

	Kills int // -chaos kill: kills of the hot lock's holder per strategy's run (the run goes on until they are done)

	LockReplicas int // -chaos failover: --lock-replicas of the instances (replicas that acknowledge each lock)

	// -soak (loadtest/soak): sample every storefront and the Redis during the whole run, judge
	// each series for a leak at the end.
	Soak       bool
	SoakEvery  time.Duration // between two samples
	SoakWarmup time.Duration // left out of each series' fit
}

// Routes of the purchases to the instances (-route).
const (
	// RouteRoundRobin spreads the purchases over the instances whatever their item (client i
	// of the closed model talks to instance i mod N; purchase i of the open model goes to
	// instance i mod N): an item's lock passes from process to process.
	RouteRoundRobin = "round-robin"
	// RouteItem sends every purchase of an item to one instance, the one nginx's consistent
	// hash of the item id picks over the instances' addresses (deploy/nginx.conf,
	// internal/chash), and the next one on the ring when it refuses the connection.
	RouteItem = "item"
)

// MaxPurchases bounds a duration-only run.
const MaxPurchases = 2_000_000

// CartWorkload reports whether the run checks out carts (-workload cart or holds).
func (c *Config) CartWorkload() bool {
	return c.Workload == WorkloadCart || c.Workload == WorkloadHolds
}

// AnyCartWorkload reports whether one of the workloads of -workload checks out carts.
func (c *Config) AnyCartWorkload() bool {
	for _, w := range c.Workloads {
		if w == WorkloadCart || w == WorkloadHolds {
			return true
		}
	}
	return c.CartWorkload()
}

// HasWorkload reports whether -workload names w (or, with no list, whether Workload is w).
func (c *Config) HasWorkload(w string) bool {
	if len(c.Workloads) == 0 {
		return c.Workload == w
	}
	for _, x := range c.Workloads {
		if x == w {
			return true
		}
	}
	return false
}

// The workloads (-workload).
const (
	// WorkloadPurchase buys one item per request (POST /api/items/:id/purchase).
	WorkloadPurchase = "purchase"
	// WorkloadCart checks out carts of 1 to maxCartLines lines (POST /api/checkout).
	WorkloadCart = "cart"
	// WorkloadHolds places holds on carts (POST /api/holds) and confirms, cancels or leaves
	// each to expire, with some direct checkouts among them.
	WorkloadHolds = "holds"
)
