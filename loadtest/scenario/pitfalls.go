package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/report"
)

// The pitfalls scenario (-scenario pitfalls) runs every broken lock (SETNX then EXPIRE, release
// by a plain DEL, a fixed lease without a watchdog), lockless alternative (an optimistic
// version check, the stock kept in Redis) and broken cart (locks taken in request order, lines
// checked one at a time) next to its fix, each under a script that makes the failure happen on every
// run: the lease, the work, the order of the buyers and the faults are fixed, and every step
// waits for the condition it needs (a lock held, a lease run out) with margins of hundreds of
// milliseconds. The instances run with a short lease and lock wait:
const (
	PitfallLease = 500 * time.Millisecond
	PitfallWait  = 3 * time.Second
)

// The roles of a row.
const (
	rolePitfall = "pitfall"
	roleFix     = "fix"
)

// pitfallScript is the scenario's table, in order: each case, the strategy of each of its
// rows, whether the row shows the pitfall or its fix, the verdict it must show, and its
// lesson. Each case's step runs its rows (scripted) and fills in what it saw.
var pitfallScript = []report.PitfallRow{
	{Case: "setnx-expire", Strategy: "setnx-expire", Role: rolePitfall, Expected: verdict.Blocked,
		Lesson: "acquire and lease in one command (SET NX PX): a holder that dies between SETNX and EXPIRE leaves a lock nobody can take"},
	{Case: "setnx-expire", Strategy: "lock", Role: roleFix, Expected: verdict.Safe,
		Lesson: "a lease set with the lock expires by itself: a dead holder costs one lease, not the item"},
	{Case: "del-release", Strategy: "del-release", Role: rolePitfall, Expected: verdict.Oversold,
		Lesson: "release only your own lock: a plain DEL after the lease ran out deletes the next holder's lock, and a third buyer joins the second"},
	{Case: "del-release", Strategy: "fixed-lease", Role: roleFix, Expected: verdict.Safe,
		Lesson: "an owner-checked compare-and-delete (GET == token, then DEL, in one script) leaves the next holder's lock alone"},
	{Case: "fixed-lease", Strategy: "fixed-lease", Role: rolePitfall, Expected: verdict.Oversold,
		Lesson: "a fixed lease shorter than the work lets a second holder in beside the first: renew it, and notice when it is lost"},
	{Case: "fixed-lease", Strategy: "lock", Role: roleFix, Expected: verdict.Safe,
		Lesson: "the watchdog renews the lease while the holder works (and tells it when the lock is lost)"},
	{Case: "fixed-lease", Strategy: "lock+guard", Role: roleFix, Expected: verdict.Safe,
		Lesson: "the fence and the guard make a stale holder's write fail, whatever happened to the lock"},
	{Case: "optimistic", Strategy: "optimistic", Role: roleFix, Expected: verdict.Safe,
		Lesson: "no lock: the version check makes a stale write change nothing; under contention every lost race costs its work again"},
	{Case: "redis-stock", Strategy: "redis-stock", Role: rolePitfall, Expected: verdict.Oversold,
		Lesson: "Redis is not the system of record: a restart from an older snapshot (or a failover) brings sold units back, and they sell again"},
	{Case: "redis-stock", Strategy: "watch", Role: rolePitfall, Expected: verdict.Oversold,
		Lesson: "WATCH/MULTI/EXEC is exact on the mirror, and loses with it: the check is only as durable as Redis"},
	{Case: "redis-stock", Strategy: "redis-stock+guard", Role: roleFix, Expected: verdict.Safe,
		Lesson: "let the database's conditional update have the last word; give refused units back to the mirror"},
	{Case: "cart-order", Strategy: strategyRequestOrder, Role: rolePitfall, Expected: verdict.Blocked,
		Lesson: "carts that lock their items in request order deadlock: {A,B} holds A and waits for B, {B,A} holds B and waits for A, until the lock wait ends"},
	{Case: "cart-order", Strategy: "lock+guard", Role: roleFix, Expected: verdict.Safe,
		Lesson: "take a cart's locks in one canonical order (sorted), all or none: the second cart waits for the first, and both sell"},
	{Case: "cart-lines", Strategy: strategyLineByLine, Role: rolePitfall, Expected: verdict.Oversold,
		Lesson: "check a cart as a whole: two lines of one item each fit the stock alone, and together take more than there is"},
	{Case: "cart-lines", Strategy: "guard", Role: roleFix, Expected: verdict.Safe,
		Lesson: "merge the lines of one item, then check and write them in one transaction (the guarded update): the cart is refused"},
}

// scripted returns the rows of case c of the script, in order.
func scripted(c string) []report.PitfallRow {
	var out []report.PitfallRow
	for _, row := range pitfallScript {
		if row.Case == c {
			out = append(out, row)
		}
	}
	return out
}

// pitfallRun is the state of one scenario run.
type pitfallRun struct {
	cfg   config.Config
	cl    *cluster.Cluster
	apis  []*client.API
	rdb   *redis.Client
	info  map[string]storeapi.Strategy
	seq   int
	logw  io.Writer
	rows  []report.PitfallRow
	runID string
}

// RunPitfalls starts its own cluster (a redis-server that keeps its snapshots, the instances
// with a short lease) and runs every case; rows come in the order of the table.
func RunPitfalls(ctx context.Context, cfg config.Config, logw io.Writer) ([]report.PitfallRow, error) {
	redisDir, err := os.MkdirTemp("", "stockguard-pitfalls-redis-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(redisDir)
	cl, err := cluster.Start(ctx, cluster.Config{Bin: cfg.Bin, Instances: max(cfg.Instances, 3), Lease: PitfallLease,
		Args: []string{"--lock-wait", PitfallWait.String()}, RedisDir: redisDir, DB: cfg.DB, Log: logw})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	hc := client.NewHTTPClient(64, cfg.Timeout)
	defer hc.CloseIdleConnections()
	r := &pitfallRun{cfg: cfg, cl: cl, rdb: cl.Redis.Client(), logw: logw, info: map[string]storeapi.Strategy{},
		runID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	defer r.rdb.Close()
	for _, u := range cl.URLs() {
		r.apis = append(r.apis, &client.API{Base: u, Token: cl.AdminToken, HC: hc})
	}
	infos, err := r.apis[0].Strategies(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		r.info[in.Name] = in
	}
	for _, row := range pitfallScript {
		if _, ok := r.info[row.Strategy]; !ok && !demoCartStrategies[row.Strategy] {
			return nil, fmt.Errorf("the storefront does not offer strategy %q (GET /api/strategies)", row.Strategy)
		}
	}
	for _, step := range []func(context.Context) error{r.setnxExpire, r.delRelease, r.fixedLease, r.optimistic, r.redisStock,
		r.cartOrder, r.cartLines} {
		if err := step(ctx); err != nil {
			return r.rows, err
		}
	}
	return r.rows, nil
}

func (r *pitfallRun) logf(format string, a ...any) {
	if !r.cfg.Quiet {
		logf(r.logw, format, a...)
	}
}

// reset makes a catalogue of one item of stock units and returns its id.
func (r *pitfallRun) reset(ctx context.Context, stock int) (int64, error) {
	items, err := resetCatalogue(ctx, config.Config{Items: 1, Stock: stock}, r.apis[0])
	if err != nil {
		return 0, err
	}
	return items[0].ID, nil
}

// send makes one purchase of one unit through instance i (mod the instances).
func (r *pitfallRun) send(ctx context.Context, a *client.API, id int64, strategy string, work time.Duration, fault string) client.PurchaseResult {
	r.seq++
	key := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
	return a.Purchase(ctx, client.PurchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: strategy, Work: work, Fault: fault})
}

// burst sends n purchases at once, round-robin over the instances, and returns their results.
func (r *pitfallRun) burst(ctx context.Context, id int64, strategy string, n int, work time.Duration) []client.PurchaseResult {
	out := make([]client.PurchaseResult, n)
	var wg sync.WaitGroup
	for i := range n {
		r.seq++
		key := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
		a := r.apis[i%len(r.apis)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = a.Purchase(ctx, client.PurchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: strategy, Work: work})
		}()
	}
	wg.Wait()
	return out
}

// async sends one purchase in the background; the returned function waits for its result.
func (r *pitfallRun) async(ctx context.Context, a *client.API, id int64, strategy string, work time.Duration) func() client.PurchaseResult {
	r.seq++
	key := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
	ch := make(chan client.PurchaseResult, 1)
	go func() {
		ch <- a.Purchase(ctx, client.PurchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: strategy, Work: work})
	}()
	return func() client.PurchaseResult { return <-ch }
}

// finish reads the item's stats, fills the row's numbers and verdict, and records the row
// (finishItems of the one item: an item the stats do not show is an error, not an empty row).
func (r *pitfallRun) finish(ctx context.Context, row report.PitfallRow, id int64, results []client.PurchaseResult) error {
	return r.finishItems(ctx, row, []int64{id}, results)
}

// answerCounts counts results by error code, or by status for an answer without one.
func answerCounts(results []client.PurchaseResult) map[string]int {
	m := map[string]int{}
	for _, res := range results {
		m[answerOf(res)]++
	}
	return m
}

func countCode(results []client.PurchaseResult, code string) int {
	n := 0
	for _, res := range results {
		if res.Code == code {
			n++
		}
	}
	return n
}

func answerOf(res client.PurchaseResult) string {
	if res.Code != "" {
		return res.Code
	}
	return strconv.Itoa(res.Status)
}

// QuietRedis discards go-redis's own log lines: while the scenario restarts Redis, the pool
// logs every refused dial, and the scenario reports what matters itself.
type QuietRedis struct{}

func (QuietRedis) Printf(context.Context, string, ...any) {}
