package scenario

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
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

// finish reads the item's stats, fills the row's numbers and verdict, and records the row.
func (r *pitfallRun) finish(ctx context.Context, row report.PitfallRow, id int64, results []client.PurchaseResult) error {
	stats, err := r.apis[0].Stats(ctx)
	if err != nil {
		return fmt.Errorf("%s: GET /api/stats: %w", row.Strategy, err)
	}
	var st client.ItemStats
	for _, s := range stats {
		if s.ItemID == id {
			st = s
		}
	}
	row.Sold, row.Initial = st.SoldUnits, st.InitialStock
	row.Answers = answerCounts(results)
	if row.Verdict == "" {
		it := checks.ItemOf(st)
		c := verdict.Between(verdict.Fresh(it), it) // every row starts on a freshly reset item
		c.Blocked = row.Blocked
		row.Verdict = c.Verdict()
	}
	row.OK = row.Verdict == row.Expected
	r.logf("pitfalls: %-18s %-7s %-8s sold %d of %d  %s", row.Strategy, row.Role, row.Verdict, row.Sold, row.Initial, row.Detail)
	r.rows = append(r.rows, row)
	return nil
}

// setnxExpire: the holder dies between SETNX and EXPIRE (the injected crash); every later buyer
// waits its whole lock wait and is refused; the key has no TTL. The fix, lock: a storefront
// process is killed (SIGKILL) while it holds the item's lock; its lease runs out and the
// other processes sell.
func (r *pitfallRun) setnxExpire(ctx context.Context) error {
	rows := scripted("setnx-expire")
	id, err := r.reset(ctx, 5)
	if err != nil {
		return err
	}
	crash := r.send(ctx, r.apis[0], id, rows[0].Strategy, 0, "crash")
	var detail []string
	if crash.Status != http.StatusServiceUnavailable {
		detail = append(detail, fmt.Sprintf("the crashed purchase answered %d %s, 503 expected", crash.Status, crash.Code))
	}
	prefix := r.info[rows[0].Strategy].RedisKeyPrefix
	keys, err := r.noTTLKeys(ctx, rows[0].Strategy, prefix)
	if err != nil {
		return err
	}
	results := r.burst(ctx, id, rows[0].Strategy, 6, 0)
	timeouts := countCode(results, "lock_timeout")
	row := rows[0]
	row.Blocked = len(keys) == 1 && len(detail) == 0 && verdict.AllRefused(answerCounts(results), "lock_timeout", len(results))
	detail = append(detail, fmt.Sprintf("crash after SETNX: key with no TTL %v; %d of %d buyers lock_timeout after %s", keys, timeouts, len(results), PitfallWait))
	if len(keys) > 0 {
		if err := r.rdb.Del(ctx, keys...).Err(); err != nil { // the scenario cleans up by hand
			return fmt.Errorf("delete the no-TTL key: %w", err)
		}
		left, err := r.noTTLKeys(ctx, rows[0].Strategy, prefix)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("the no-TTL key is still there after its deletion: %v", left)
		}
		detail = append(detail, "deleted by the scenario afterwards")
	}
	row.Detail = strings.Join(detail, "; ")
	if err := r.finish(ctx, row, id, append([]client.PurchaseResult{crash}, results...)); err != nil {
		return err
	}

	// The fix: a real crash of a real holder of lock.
	if id, err = r.reset(ctx, 5); err != nil {
		return err
	}
	victim, err := r.cl.StartInstance(ctx)
	if err != nil {
		return fmt.Errorf("start the instance to crash: %w", err)
	}
	va := &client.API{Base: victim.URL, Token: r.cl.AdminToken, HC: r.apis[0].HC}
	row = rows[1]
	wait := r.async(ctx, va, id, row.Strategy, time.Second)
	l, held := r.awaitHolder(ctx, victim, id)
	victim.Kill()
	_ = wait() // its connection is cut by the crash
	if !held {
		row.Verdict = "NO HOLDER"
		row.Detail = "the instance to crash was never seen holding the lock"
		return r.finish(ctx, row, id, nil)
	}
	results = r.burst(ctx, id, row.Strategy, 6, 0)
	row.Detail = fmt.Sprintf("holder pid %d killed (SIGKILL) holding token %d; its lease ran out; the others sold", victim.PID(), l.Token)
	// A buyer refused after its whole lock wait: the dead holder's lock kept the item.
	row.Blocked = countCode(results, "lock_timeout") > 0
	return r.finish(ctx, row, id, results)
}

// awaitHolder waits (bounded) until instance in holds item id's lock (its own process: the
// answer names its pid), and returns the lock.
func (r *pitfallRun) awaitHolder(ctx context.Context, in *cluster.Instance, id int64) (storeapi.HeldLock, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		h, ok := storeapi.AwaitHolder(ctx, r.apis[0].HC, []string{in.URL}, id, 10*time.Millisecond)
		switch {
		case !ok:
			return storeapi.HeldLock{}, false
		case h.PID == in.PID():
			return h.Lock, true
		}
	}
}

// noTTLKeys returns the keys of strategy's own lock (under prefix, from GET /api/strategies)
// that have no TTL.
func (r *pitfallRun) noTTLKeys(ctx context.Context, strategy, prefix string) ([]string, error) {
	keys, err := r.keysUnder(ctx, strategy, prefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		ttl, err := r.rdb.Do(ctx, "TTL", k).Int()
		if err != nil {
			return nil, err
		}
		if ttl == -1 {
			out = append(out, k)
		}
	}
	return out, nil
}

// keysUnder returns the Redis keys under prefix, the prefix of strategy's own keys.
func (r *pitfallRun) keysUnder(ctx context.Context, strategy, prefix string) ([]string, error) {
	if prefix == "" {
		return nil, fmt.Errorf("GET /api/strategies gives no redis_key_prefix for %s", strategy)
	}
	var keys []string
	iter := r.rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
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

// delRelease: A takes the lock of the last unit and works for 1s; once A is seen holding it, B
// and C (300ms of work each) come and wait; A's 500ms lease runs out and B takes the lock; A's
// client gives up 650ms after A took the lock (A writes nothing) and A's release runs: a plain DEL deletes B's lock, C takes it at
// once, reads the stock B has not written yet, and both write. The fix: the same script with
// the owner-checked release (fixed-lease: B's and C's work fits in the lease).
func (r *pitfallRun) delRelease(ctx context.Context) error {
	for _, row := range scripted("del-release") {
		id, err := r.reset(ctx, 1)
		if err != nil {
			return err
		}
		actx, hangUp := context.WithCancel(ctx)
		a := r.async(actx, r.apis[0], id, row.Strategy, time.Second)
		// B and C come once A holds the lock (a key with a lease under the strategy's prefix),
		// and A's client hangs up 150ms after A's lease ran out, whatever the machine's load.
		held, err := r.awaitLeasedKey(ctx, row.Strategy)
		if err != nil {
			hangUp()
			return err
		}
		if !held {
			hangUp()
			row.Verdict, row.Detail = "NO HOLDER", "A was never seen holding the lock"
			if err := r.finish(ctx, row, id, []client.PurchaseResult{a()}); err != nil {
				return err
			}
			continue
		}
		timer := time.AfterFunc(PitfallLease+150*time.Millisecond, hangUp)
		b := r.async(ctx, r.apis[1%len(r.apis)], id, row.Strategy, 300*time.Millisecond)
		c := r.async(ctx, r.apis[2%len(r.apis)], id, row.Strategy, 300*time.Millisecond)
		results := []client.PurchaseResult{a(), b(), c()}
		if !timer.Stop() && results[0].Status == 0 {
			results[0].Code = "timeout" // A's client gave up: its own deadline, as a client's timeout
		}
		hangUp()
		row.Detail = fmt.Sprintf("A (1s of work, %s lease) hangs up %s after it took the lock, after B took over: %s",
			PitfallLease, PitfallLease+150*time.Millisecond, answerOf(results[0]))
		if err := r.finish(ctx, row, id, results); err != nil {
			return err
		}
	}
	return nil
}

// awaitLeasedKey waits (bounded) until a key with a lease (a TTL) is under strategy's own
// prefix: its lock is held (its fencing counter has no TTL). The catalogue reset before the
// case deleted every key under the prefix.
func (r *pitfallRun) awaitLeasedKey(ctx context.Context, strategy string) (bool, error) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		keys, err := r.keysUnder(ctx, strategy, r.info[strategy].RedisKeyPrefix)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			ttl, err := r.rdb.PTTL(ctx, k).Result()
			if err != nil {
				return false, err
			}
			if ttl > 0 {
				return true, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return false, nil
}

func answerOf(res client.PurchaseResult) string {
	if res.Code != "" {
		return res.Code
	}
	return strconv.Itoa(res.Status)
}

// fixedLease: four buyers of two units at once, 700ms of work each against a 500ms fixed
// lease: each holder's lease runs out mid-work, the next one enters and reads the stock the
// previous has not written yet. The fixes: the watchdog (lock) and the fence with the guard
// (lock+guard).
func (r *pitfallRun) fixedLease(ctx context.Context) error {
	for _, row := range scripted("fixed-lease") {
		id, err := r.reset(ctx, 2)
		if err != nil {
			return err
		}
		results := r.burst(ctx, id, row.Strategy, 4, 700*time.Millisecond)
		row.Detail = fmt.Sprintf("4 buyers of 2 units, 700ms of work each, %s lease", PitfallLease)
		if err := r.finish(ctx, row, id, results); err != nil {
			return err
		}
	}
	return nil
}

// optimistic: forty buyers of twenty units at once, 20ms of work each: safe, and the version
// conflicts are counted.
func (r *pitfallRun) optimistic(ctx context.Context) error {
	id, err := r.reset(ctx, 20)
	if err != nil {
		return err
	}
	row := scripted("optimistic")[0]
	results := r.burst(ctx, id, row.Strategy, 40, 20*time.Millisecond)
	retries := 0
	for _, res := range results {
		retries += res.Receipt.Retries
	}
	row.Detail = fmt.Sprintf("40 buyers of 20 units, 20ms of work: %d version conflicts retried by the sales", retries)
	return r.finish(ctx, row, id, results)
}

// redisStock: ten units; three sales, SAVE, four more sales, then Redis is killed and
// restarted from that snapshot: the mirror says seven left where three are. Then ten more
// purchases, one after the other.
func (r *pitfallRun) redisStock(ctx context.Context) error {
	for _, row := range scripted("redis-stock") {
		id, err := r.reset(ctx, 10)
		if err != nil {
			return err
		}
		var results []client.PurchaseResult
		results = append(results, r.sequential(ctx, id, row.Strategy, 3)...)
		if err := r.rdb.Save(ctx).Err(); err != nil {
			return fmt.Errorf("redis SAVE: %w", err)
		}
		results = append(results, r.sequential(ctx, id, row.Strategy, 4)...)
		if err := r.cl.Redis.RestartFromSnapshot(); err != nil {
			return err
		}
		for _, a := range r.apis {
			if err := waitReady(ctx, a); err != nil {
				return err
			}
		}
		// The catalogue has one item: its mirrored stock is the one key under the mirror's prefix.
		keys, err := r.keysUnder(ctx, row.Strategy, r.info[row.Strategy].RedisKeyPrefix)
		if err != nil {
			return err
		}
		if len(keys) != 1 {
			return fmt.Errorf("%s: %d keys under the mirror's prefix after the restart, the one item's expected: %v", row.Strategy, len(keys), keys)
		}
		mirrored, err := r.rdb.Get(ctx, keys[0]).Int()
		if err != nil {
			return fmt.Errorf("GET %s after the restart: %w", keys[0], err)
		}
		after := r.sequential(ctx, id, row.Strategy, 10)
		results = append(results, after...)
		row.Detail = fmt.Sprintf("SAVE after 3 sales, 4 more, Redis restarted from the snapshot: mirror %d, truth 3; %d sold after",
			mirrored, countCode(after, ""))
		if err := r.finish(ctx, row, id, results); err != nil {
			return err
		}
	}
	return nil
}

// sequential sends n purchases one after the other, round-robin over the instances; one
// answered unavailable (a connection that died with the old Redis) is sent again once.
func (r *pitfallRun) sequential(ctx context.Context, id int64, strategy string, n int) []client.PurchaseResult {
	var out []client.PurchaseResult
	for i := range n {
		a := r.apis[i%len(r.apis)]
		res := r.send(ctx, a, id, strategy, 0, "")
		if res.Code == "unavailable" {
			res = r.send(ctx, a, id, strategy, 0, "")
		}
		out = append(out, res)
	}
	return out
}

// waitReady waits until a answers /readyz (which pings Redis), bounded.
func waitReady(ctx context.Context, a *client.API) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := a.Ready(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready after the Redis restart: %w", a.Base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// QuietRedis discards go-redis's own log lines: while the scenario restarts Redis, the pool
// logs every refused dial, and the scenario reports what matters itself.
type QuietRedis struct{}

func (QuietRedis) Printf(context.Context, string, ...any) {}
