package scenario

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
)

// usageError is a configuration error (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// ParseConfig parses the command line. Errors are *usageError, or flag.ErrHelp after -h.
func ParseConfig(args []string, stderr io.Writer) (config.Config, error) {
	var c config.Config
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.Usage = func() {}     // -h is handled below; a bad flag gets one line, not the whole list
	var targets, strategies, routes, workloads, mixSkip string
	fs.IntVar(&c.Instances, "instances", 3, "self-contained mode: storefront processes to start")
	fs.StringVar(&targets, "target", "", "comma-separated base URLs of running storefronts (loopback only) instead of starting them")
	fs.StringVar(&c.AdminToken, "admin-token", "", "admin token of the -target servers (needed to reset their catalogue)")
	fs.StringVar(&c.Bin, "bin", "", "self-contained mode: storefront binary to run instead of building it")
	fs.StringVar(&c.DB, "db", cluster.DBSQLite, `self-contained mode: the instances' shared database: "sqlite" (a file), "postgres" (a private PostgreSQL server it starts), or a postgres:// URL of an existing one`)
	fs.StringVar(&strategies, "strategies", "", "comma-separated strategies to compare (default: every strategy the servers offer outside demo mode; with -chaos "+fault.LockOnlyNames()+": those of them that take a lock)")
	fs.IntVar(&c.Items, "items", 5, "items in the catalogue")
	fs.IntVar(&c.Stock, "stock", 100, "initial stock of every item")
	fs.IntVar(&c.Requests, "requests", 2000, "purchases per strategy")
	fs.DurationVar(&c.Duration, "duration", 0, "run each strategy this long (with -requests: whichever ends first)")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "closed model: concurrent clients; open model: cap of requests in flight (default 1000 with -rate)")
	fs.Float64Var(&c.Rate, "rate", 0, "open model: purchases per second at a fixed arrival rate (0 = closed model)")
	fs.IntVar(&c.Quantity, "quantity", 1, "max units per purchase (each asks for 1..quantity)")
	fs.Float64Var(&c.Hot, "hot", 0.8, "share of purchases on the first (hot) item, 0..1")
	fs.Float64Var(&c.Retry, "retry", 0.05, "share of purchases sent twice with the same Idempotency-Key (half of them both at once), 0..1")
	fs.DurationVar(&c.Work, "work", 20*time.Millisecond, "simulated slow work per purchase (X-Simulated-Work, at most 1s)")
	fs.StringVar(&c.Chaos, "chaos", "", fault.Help())
	fs.DurationVar(&c.Latency, "latency", 20*time.Millisecond, "-chaos latency: added delay of each direction of every link to Redis")
	fs.DurationVar(&c.Lease, "lease", time.Second, "chaos mode: --lock-lease of the instances")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "client timeout of one HTTP request")
	fs.Int64Var(&c.Seed, "seed", 0, "random seed of the workload (0: time-based)")
	fs.StringVar(&c.JSONFile, "json", "", "write the full report as JSON to this file")
	fs.StringVar(&c.HTMLFile, "html", "", "write an HTML report with charts (works offline) to this file")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress output")
	fs.StringVar(&c.Scenario, "scenario", "", `"pitfalls": every broken lock (SETNX then EXPIRE, release by plain DEL, a fixed lease) and lockless alternative (optimistic version check, stock kept in Redis) next to its fix, scripted`)
	fs.BoolVar(&c.Perf, "perf", false, "same-run performance: one storefront and redis-server; /healthz, guard, lock+guard and lock+guard --max-batch 1 alternated on 1, then 10 items, no work (uses -duration per phase, -concurrency, -rounds, -bin, -db, -json)")
	fs.IntVar(&c.Rounds, "rounds", 3, "-perf: measured rounds of every target (after a warm-up round)")
	fs.StringVar(&routes, "route", config.RouteRoundRobin, `how purchases reach the instances: "round-robin" whatever the item, or "item": all of an item's`+"\n"+
		`on one instance, picked by nginx's consistent hash of the item id (deploy/nginx.conf); "item,round-robin" runs each strategy both ways`)
	fs.Float64Var(&c.Reads, "reads", 0.1, "share of operations that read an item's stock (GET /api/items/:id) between the purchases, for the checked history, 0..0.9")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", checks.DefaultCheckTimeout, "bound of the linearizability check of each strategy's history (0: not checked)")
	fs.StringVar(&workloads, "workload", config.WorkloadPurchase, `"purchase" (one item per request), "cart" (checkouts of carts of 1-4 lines, the hot item first with`+"\n"+
		`probability -hot, repeated lines) or "holds" (holds on such carts confirmed, cancelled or left to expire on -hold-ttl, among direct checkouts);`+"\n"+
		`with -chaos mix a comma-separated list ("purchase,cart,holds"): each strategy runs each workload for -duration in turn`)
	fs.Float64Var(&c.CartSingles, "cart-singles", 0.2, "-workload cart: share of single purchases of the hot item among the checkouts, 0..1 (their lock waits are reported apart)")
	fs.DurationVar(&c.HoldTTL, "hold-ttl", time.Second, "-workload holds: the ttl of every hold (1s..1h)")
	fs.BoolVar(&c.Spike, "spike", false, "open model: a flash sale, arrivals ramp from 0 to -rate in one second, then hold")
	fs.Var((*config.ThresholdList)(&c.Thresholds), "threshold", "a bound each strategy's run must meet, else exit 3: p50|p90|p99|max|mean<200ms, errors<1%, rps>500 (repeatable, or comma-separated)")
	fs.DurationVar(&c.HangFor, "hang-for", 8*time.Second, "-chaos redis-hang, db-hang: how long the process stays stopped (SIGSTOP, then SIGCONT)")
	fs.StringVar(&c.OnRedisDown, "on-redis-down", "guard", `-chaos redis-hang: --on-redis-down of the instances, "guard" or "fail"`)
	fs.DurationVar(&c.StreamHold, "stream-hold", 0, "self-contained mode: --stream-hold of the instances, how long one hold of lock+guard keeps admitting\n"+
		"the buyers who arrive while it works even when another instance waits for its lock (0: the storefront's default, none)")
	fs.BoolVar(&c.NoStream, "no-stream", false, "self-contained mode: --stream-alone=false on the instances: a hold of lock+guard sells to the buyers waiting\n"+
		"when it begins, instead of admitting the late ones while no other instance waits for its locks (to compare)")
	fs.BoolVar(&c.Soak, "soak", false, "with -chaos mix: sample every storefront (goroutines, heap, RSS, open fds, database connections in use, overdue holds) and the Redis\n"+
		"(clients, keys, pub/sub channels) every -soak-every over the whole run, fit each series after -soak-warmup; one growing past its bound is a LEAK (exit 4)")
	fs.DurationVar(&c.SoakEvery, "soak-every", 2*time.Second, "-soak: between two samples (200ms..1m)")
	fs.DurationVar(&c.SoakWarmup, "soak-warmup", 20*time.Second, "-soak: the start of each series left out of its fit (1s..10m)")
	fs.IntVar(&c.LockReplicas, "lock-replicas", 0, "-chaos failover: --lock-replicas of the instances; 1 makes each lock wait for the replica's acknowledgement, so the promoted replica has it (lock is then expected SAFE)")
	fs.IntVar(&c.MaxPurchases, "max-purchases", 64, "-chaos db-hang: --max-purchases of the instances (-concurrency defaults to 2x it per instance)")
	fs.DurationVar(&c.MixGap, "mix-gap", fault.DefaultMixGap, "-chaos mix: the pause before each fault is drawn between this and twice it")
	fs.StringVar(&mixSkip, "mix-skip", "", "-chaos mix: fault kinds left out of the schedule, comma-separated (of: "+strings.Join(fault.MixKinds(), ", ")+"); -soak -mix-skip kill keeps every storefront alive the whole run")
	fs.IntVar(&c.Kills, "kills", 3, "-chaos kill: kills of the hot lock's holder per strategy's run; the run goes on past -duration until they are done")
	fs.IntVar(&c.MixRounds, "mix-rounds", 0, "-chaos mix: run each strategy past -duration until this many full rounds of every fault kind fired (0: -duration alone)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "usage: go run ./loadtest [flags]   (self-contained unless -target is given)")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return c, err
		}
		return c, usageErr("%v (see -h)", err)
	}
	if fs.NArg() > 0 {
		return c, usageErr("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["duration"] && !set["requests"] {
		c.Requests = 0
	}
	if m, ok := fault.ModeOf(c.Chaos); ok && m.Defaults != nil {
		m.Defaults(&c, set)
	}
	if c.Perf {
		if !set["duration"] {
			c.Duration = 4 * time.Second
		}
		if !set["concurrency"] {
			c.Concurrency = 64
		}
		for _, f := range []string{"target", "strategies", "rate", "work", "chaos", "html", "items", "stock", "requests", "hot", "retry", "quantity", "instances"} {
			if set[f] {
				return c, usageErr("-%s does not apply to -perf", f)
			}
		}
		c.Requests, c.Work = 0, 0
	}
	if c.Rate > 0 && !set["concurrency"] {
		c.Concurrency = 1000 // open model: a cap of requests in flight, not a number of clients
	}
	if targets != "" {
		if set["instances"] {
			return c, usageErr("-instances applies to the self-contained mode, not to -target")
		}
		c.Instances = 0
		c.Targets = splitList(targets)
	}
	c.Strategies = splitList(strategies)
	if set["strategies"] && len(c.Strategies) == 0 {
		return c, usageErr("-strategies is empty")
	}
	c.Routes = splitList(routes)
	c.MixSkip = splitList(mixSkip)
	c.Workloads = splitList(workloads)
	if len(c.Workloads) == 0 {
		return c, usageErr("-workload is empty")
	}
	c.Workload = c.Workloads[0]
	for _, f := range []string{"soak-every", "soak-warmup"} {
		if set[f] && !c.Soak {
			return c, usageErr("-%s applies to -soak", f)
		}
	}
	if c.Perf && set["route"] {
		return c, usageErr("-route does not apply to -perf")
	}
	return c, validate(&c)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// validate checks c and fills derived defaults. Errors are *usageError.
func validate(c *config.Config) error {
	switch {
	case len(c.Targets) == 0 && (c.Instances < 1 || c.Instances > 64):
		return usageErr("-instances must be 1..64, got %d", c.Instances)
	case c.Items < 1 || c.Items > 10000:
		return usageErr("-items must be 1..10000, got %d", c.Items)
	case c.Stock < 0 || c.Stock > 1_000_000_000:
		return usageErr("-stock must be 0..1e9, got %d", c.Stock)
	case c.Requests < 0 || c.Requests > config.MaxPurchases:
		return usageErr("-requests must be 0..%d, got %d", config.MaxPurchases, c.Requests)
	case c.Duration < 0:
		return usageErr("-duration must not be negative")
	case c.Requests == 0 && c.Duration == 0:
		return usageErr("give -requests or -duration")
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return usageErr("-concurrency must be 1..10000, got %d", c.Concurrency)
	case c.Rate < 0 || c.Rate > 1e6:
		return usageErr("-rate must be 0..1e6, got %g", c.Rate)
	case c.Quantity < 1 || c.Quantity > 1000:
		return usageErr("-quantity must be 1..1000, got %d", c.Quantity)
	case c.Hot < 0 || c.Hot > 1:
		return usageErr("-hot must be 0..1, got %g", c.Hot)
	case c.Retry < 0 || c.Retry > 1:
		return usageErr("-retry must be 0..1, got %g", c.Retry)
	case c.Spike && c.Rate <= 0:
		return usageErr("-spike needs -rate (the rate the flash sale ramps to)")
	case c.Reads < 0 || c.Reads > 0.9:
		return usageErr("-reads must be 0..0.9, got %g", c.Reads)
	case c.CheckTimeout < 0:
		return usageErr("-check-timeout must not be negative")
	case c.Work < 0 || c.Work > time.Second:
		return usageErr("-work must be 0..1s, got %s", c.Work)
	case !knownChaos(c.Chaos):
		return usageErr(`-chaos must be one of %s or none, got %q`, fault.Names(), c.Chaos)
	case len(c.Targets) > 0 && c.DB != cluster.DBSQLite && c.DB != "":
		return usageErr("-db applies to the self-contained mode; -target servers use their own database")
	case c.DB != "" && c.DB != cluster.DBSQLite && c.DB != cluster.DBPostgres && !isPostgresURL(c.DB):
		return usageErr(`-db must be "sqlite", "postgres" or a postgres:// URL, got %q`, c.DB)
	case fault.ModeFor(*c).Name != fault.ChaosNone && len(c.Targets) > 0:
		return usageErr("-chaos %s needs the self-contained mode (it starts the processes and the Redis it breaks)", c.Chaos)
	case fault.ModeFor(*c).Second != nil && (c.Latency <= 0 || c.Latency > time.Second):
		return usageErr("-latency must be 1ms..1s, got %s", c.Latency)
	case fault.ModeFor(*c).Name != fault.ChaosNone && (c.Lease < 100*time.Millisecond || c.Lease > time.Minute):
		return usageErr("-lease must be 100ms..1m, got %s", c.Lease)
	case c.Timeout < 100*time.Millisecond || c.Timeout > 10*time.Minute:
		return usageErr("-timeout must be 100ms..10m, got %s", c.Timeout)
	case c.Perf && (c.Rounds < 1 || c.Rounds > 100):
		return usageErr("-rounds must be 1..100, got %d", c.Rounds)
	case c.Perf && (c.Duration < 100*time.Millisecond || c.Duration > 10*time.Minute):
		return usageErr("-perf: -duration (per phase) must be 100ms..10m, got %s", c.Duration)
	case c.StreamHold < 0 || c.StreamHold > time.Minute:
		return usageErr("-stream-hold must be 0..1m, got %s", c.StreamHold)
	case len(c.Targets) > 0 && c.StreamHold > 0:
		return usageErr("-stream-hold applies to the self-contained mode; set --stream-hold on the -target servers")
	case len(c.Targets) > 0 && c.NoStream:
		return usageErr("-no-stream applies to the self-contained mode; set --stream-alone=false on the -target servers")
	case len(c.Targets) > 0 && c.AdminToken == "":
		return usageErr("-target needs -admin-token (the run resets the catalogue)")
	case (c.Chaos == fault.ChaosRedisHang || c.Chaos == fault.ChaosDBHang) && (c.HangFor < 2*time.Second || c.HangFor > 5*time.Minute):
		return usageErr("-hang-for must be 2s..5m (the hung window starts 1.5s after the stop), got %s", c.HangFor)
	case c.Chaos == fault.ChaosRedisHang && c.OnRedisDown != "guard" && c.OnRedisDown != "fail":
		return usageErr(`-on-redis-down must be "guard" or "fail", got %q`, c.OnRedisDown)
	case c.Chaos == fault.ChaosDBHang && c.DB != cluster.DBPostgres:
		return usageErr("-chaos db-hang needs -db postgres (it stops the private PostgreSQL server the load test starts; SQLite runs inside the storefronts and cannot hang alone)")
	case c.Chaos == fault.ChaosDBHang && (c.MaxPurchases < 1 || c.MaxPurchases > 100000):
		return usageErr("-max-purchases must be 1..100000, got %d", c.MaxPurchases)
	case c.Chaos == fault.ChaosMix && c.MixGap != 0 && (c.MixGap < 10*time.Millisecond || c.MixGap > time.Minute):
		return usageErr("-mix-gap must be 10ms..1m, got %s", c.MixGap)
	case len(c.MixSkip) > 0 && c.Chaos != fault.ChaosMix:
		return usageErr("-mix-skip applies to -chaos mix only")
	case len(c.MixSkip) > 0 && !isSubset(c.MixSkip, fault.MixKinds()):
		return usageErr("-mix-skip: the fault kinds of -chaos mix are %s, got %s", strings.Join(fault.MixKinds(), ", "), strings.Join(c.MixSkip, ","))
	case len(c.MixSkip) > 0 && isSubset(fault.MixKindsOffered(c.DB == cluster.DBPostgres), c.MixSkip):
		return usageErr("-mix-skip leaves no fault kind to -chaos mix (with -db %s: %s)", cmp.Or(c.DB, cluster.DBSQLite), strings.Join(fault.MixKindsOffered(c.DB == cluster.DBPostgres), ", "))
	case c.Chaos == fault.ChaosKill && (c.Kills < 1 || c.Kills > 1000):
		return usageErr("-kills must be 1..1000, got %d", c.Kills)
	case c.Chaos == fault.ChaosKill && slices.Contains(c.Routes, config.RouteItem):
		return usageErr("-chaos kill measures the sales gap on the survivors of a round-robin route (-route item sends every purchase of the hot item to one instance)")
	case c.MixRounds < 0 || c.MixRounds > 100:
		return usageErr("-mix-rounds must be 0..100, got %d", c.MixRounds)
	case c.MixRounds > 0 && c.Chaos != fault.ChaosMix:
		return usageErr("-mix-rounds applies to -chaos mix")
	case c.LockReplicas < 0 || c.LockReplicas > 1:
		return usageErr("-lock-replicas must be 0 or 1 (the Sentinel set of -chaos failover has one replica), got %d", c.LockReplicas)
	case c.LockReplicas > 0 && c.Chaos != fault.ChaosFailover:
		return usageErr("-lock-replicas applies to -chaos failover, the one setting whose Redis has a replica")
	case c.Scenario != "" && c.Scenario != "pitfalls":
		return usageErr(`-scenario must be "pitfalls", got %q`, c.Scenario)
	case c.Scenario == "pitfalls" && (len(c.Targets) > 0 || fault.ModeFor(*c).Name != fault.ChaosNone):
		return usageErr("-scenario pitfalls starts its own processes and Redis (no -target, no -chaos)")
	}
	c.Chaos = fault.ModeFor(*c).Name // "none" is ""
	if err := validateWorkloads(c); err != nil {
		return err
	}
	if err := validateSoak(c); err != nil {
		return err
	}
	if len(c.Routes) == 0 {
		c.Routes = []string{config.RouteRoundRobin}
	}
	for i, r := range c.Routes {
		if r != config.RouteRoundRobin && r != config.RouteItem {
			return usageErr(`-route must be %q, %q or both comma-separated, got %q`, config.RouteItem, config.RouteRoundRobin, r)
		}
		if slices.Contains(c.Routes[:i], r) {
			return usageErr("-route %s given twice", r)
		}
	}
	if c.DB == "" {
		c.DB = cluster.DBSQLite
	}
	for i, t := range c.Targets {
		norm, err := checkTarget(t)
		if err != nil {
			return err
		}
		c.Targets[i] = norm
	}
	if fault.ModeFor(*c).StopsHolder && c.Timeout < 3*c.Lease+5*time.Second {
		c.Timeout = 3*c.Lease + 5*time.Second // requests to the paused instance must outlive the pause
	}
	return nil
}

// knownChaos reports whether name is a -chaos mode (or none).
func knownChaos(name string) bool {
	_, ok := fault.ModeOf(name)
	return ok
}

func isPostgresURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") && u.Host != ""
}

// checkTarget accepts http(s)://host:port with a loopback host and returns it without a
// trailing slash.
func checkTarget(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", usageErr("-target %q is not an http(s)://host:port URL", raw)
	}
	host := u.Hostname()
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return "", usageErr("-target %q: only loopback addresses (localhost, 127.0.0.0/8, ::1) are allowed", raw)
		}
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// isSubset reports whether every name of a is in b.
func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
