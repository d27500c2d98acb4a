package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pitfalls scenario (-scenario pitfalls) runs every broken lock and lockless alternative
// of the articles next to its fix, each under a script that makes the failure happen on every
// run: the lease, the work, the order of the buyers and the faults are fixed, and every step
// waits for the condition it needs (a lock held, a lease run out) with margins of hundreds of
// milliseconds. The instances run with a short lease and lock wait:
const (
	pitfallLease = 500 * time.Millisecond
	pitfallWait  = 3 * time.Second
)

// pitfallRow is one line of the scenario's table.
type pitfallRow struct {
	Case     string         `json:"case"`     // the failure being shown
	Strategy string         `json:"strategy"` // X-Strategy
	Role     string         `json:"role"`     // "pitfall" or "fix"
	Verdict  string         `json:"verdict"`  // OVERSOLD, BLOCKED or SAFE
	Sold     int            `json:"sold_units"`
	Initial  int            `json:"initial_stock"`
	Answers  map[string]int `json:"answers"` // by status code or error code
	Detail   string         `json:"detail"`  // what the script observed
	Lesson   string         `json:"lesson"`
	OK       bool           `json:"ok"` // the pitfall showed its failure, or the fix held
}

// expected is the verdict a row must show: a pitfall its failure, a fix SAFE.
func (r *pitfallRow) expected() string {
	if r.Role == "fix" {
		return VerdictSafe
	}
	if r.Case == "setnx-expire" {
		return "BLOCKED"
	}
	return VerdictOversold
}

// strategyInfo is one row of GET /api/strategies.
type strategyInfo struct {
	Name           string `json:"name"`
	Safe           bool   `json:"safe"`
	DemoOnly       bool   `json:"demo_only"`
	RedisKeyPrefix string `json:"redis_key_prefix"`
}

func (a *api) strategies(ctx context.Context) ([]strategyInfo, error) {
	var out []strategyInfo
	_, err := a.do(ctx, http.MethodGet, "/api/strategies", nil, nil, &out)
	return out, err
}

// pitfallRun is the state of one scenario run.
type pitfallRun struct {
	cfg   Config
	cl    *Cluster
	apis  []*api
	rdb   *redis.Client
	info  map[string]strategyInfo
	seq   int
	logw  io.Writer
	rows  []pitfallRow
	runID string
}

// RunPitfalls starts its own cluster (a redis-server that keeps its snapshots, the instances
// with a short lease) and runs every case; rows come in the order of the table.
func RunPitfalls(ctx context.Context, cfg Config, logw io.Writer) ([]pitfallRow, error) {
	redisDir, err := os.MkdirTemp("", "stockguard-pitfalls-redis-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(redisDir)
	cl, err := StartCluster(ctx, ClusterConfig{Bin: cfg.Bin, Instances: max(cfg.Instances, 3), Lease: pitfallLease,
		Args: []string{"--lock-wait", pitfallWait.String()}, RedisDir: redisDir, DB: cfg.DB, Log: logw})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	hc := newHTTPClient(64, cfg.Timeout)
	defer hc.CloseIdleConnections()
	r := &pitfallRun{cfg: cfg, cl: cl, rdb: cl.Redis.Client(), logw: logw, info: map[string]strategyInfo{},
		runID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	defer r.rdb.Close()
	for _, u := range cl.URLs() {
		r.apis = append(r.apis, &api{base: u, token: cl.AdminToken, hc: hc})
	}
	infos, err := r.apis[0].strategies(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /api/strategies: %w", err)
	}
	for _, in := range infos {
		r.info[in.Name] = in
	}
	for _, name := range []string{"setnx-expire", "del-release", "fixed-lease", "optimistic", "redis-stock",
		"redis-stock+guard", "watch", "lock", "lock+guard"} {
		if _, ok := r.info[name]; !ok {
			return nil, fmt.Errorf("the storefront does not offer strategy %q (GET /api/strategies)", name)
		}
	}
	for _, step := range []func(context.Context) error{r.setnxExpire, r.delRelease, r.fixedLease, r.optimistic, r.redisStock} {
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
	items, err := resetCatalogue(ctx, Config{Items: 1, Stock: stock}, r.apis[0])
	if err != nil {
		return 0, err
	}
	return items[0].ID, nil
}

// send makes one purchase of one unit through instance i (mod the instances).
func (r *pitfallRun) send(ctx context.Context, a *api, id int64, strategy string, work time.Duration, fault string) purchaseResult {
	r.seq++
	key := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
	return a.purchase(ctx, purchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: strategy, Work: work, Fault: fault})
}

// burst sends n purchases at once, round-robin over the instances, and returns their results.
func (r *pitfallRun) burst(ctx context.Context, id int64, strategy string, n int, work time.Duration) []purchaseResult {
	out := make([]purchaseResult, n)
	var wg sync.WaitGroup
	for i := range n {
		r.seq++
		key := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
		a := r.apis[i%len(r.apis)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = a.purchase(ctx, purchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: strategy, Work: work})
		}()
	}
	wg.Wait()
	return out
}

// async sends one purchase in the background; the returned function waits for its result.
func (r *pitfallRun) async(ctx context.Context, a *api, id int64, strategy string, work time.Duration) func() purchaseResult {
	r.seq++
	key := fmt.Sprintf("pf-%s-%d", r.runID, r.seq)
	ch := make(chan purchaseResult, 1)
	go func() {
		ch <- a.purchase(ctx, purchaseReq{ItemID: id, Quantity: 1, Key: key, Strategy: strategy, Work: work})
	}()
	return func() purchaseResult { return <-ch }
}

// finish reads the item's stats, fills the row's numbers and verdict, and records the row.
func (r *pitfallRun) finish(ctx context.Context, row pitfallRow, id int64, results []purchaseResult) error {
	stats, err := r.apis[0].stats(ctx)
	if err != nil {
		return fmt.Errorf("%s: GET /api/stats: %w", row.Strategy, err)
	}
	var st ItemStats
	for _, s := range stats {
		if s.ItemID == id {
			st = s
		}
	}
	row.Sold, row.Initial = st.SoldUnits, st.InitialStock
	row.Answers = map[string]int{}
	for _, res := range results {
		code := res.Code
		if code == "" {
			code = strconv.Itoa(res.Status)
		}
		row.Answers[code]++
	}
	if row.Verdict == "" {
		row.Verdict = VerdictSafe
		if st.SoldUnits > st.InitialStock || st.Stock < 0 {
			row.Verdict = VerdictOversold
		}
	}
	row.OK = row.Verdict == row.expected()
	r.logf("pitfalls: %-18s %-7s %-8s sold %d of %d  %s", row.Strategy, row.Role, row.Verdict, row.Sold, row.Initial, row.Detail)
	r.rows = append(r.rows, row)
	return nil
}

// setnxExpire: the holder dies between SETNX and EXPIRE (the injected crash); every later buyer
// waits its whole lock wait and is refused; the key has no TTL. The fix, lock: a storefront
// process is killed (SIGKILL) while it holds the item's lock; its lease runs out and the
// other processes sell.
func (r *pitfallRun) setnxExpire(ctx context.Context) error {
	const lesson = "acquire and lease in one command (SET NX PX): a holder that dies between SETNX and EXPIRE leaves a lock nobody can take"
	id, err := r.reset(ctx, 5)
	if err != nil {
		return err
	}
	crash := r.send(ctx, r.apis[0], id, "setnx-expire", 0, "crash")
	var detail []string
	if crash.Status != http.StatusServiceUnavailable {
		detail = append(detail, fmt.Sprintf("the crashed purchase answered %d %s, 503 expected", crash.Status, crash.Code))
	}
	keys, err := r.noTTLKeys(ctx, r.info["setnx-expire"].RedisKeyPrefix, id)
	if err != nil {
		return err
	}
	results := r.burst(ctx, id, "setnx-expire", 6, 0)
	timeouts := 0
	for _, res := range results {
		if res.Code == "lock_timeout" {
			timeouts++
		}
	}
	row := pitfallRow{Case: "setnx-expire", Strategy: "setnx-expire", Role: "pitfall", Lesson: lesson}
	if len(keys) == 1 && timeouts == len(results) && len(detail) == 0 {
		row.Verdict = "BLOCKED"
	}
	detail = append(detail, fmt.Sprintf("crash after SETNX: key with no TTL %v; %d of %d buyers lock_timeout after %s", keys, timeouts, len(results), pitfallWait))
	if len(keys) > 0 {
		if err := r.rdb.Del(ctx, keys...).Err(); err != nil { // the scenario cleans up by hand
			return fmt.Errorf("delete the no-TTL key: %w", err)
		}
		left, err := r.noTTLKeys(ctx, r.info["setnx-expire"].RedisKeyPrefix, id)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("the no-TTL key is still there after its deletion: %v", left)
		}
		detail = append(detail, "deleted by the scenario afterwards")
	}
	row.Detail = strings.Join(detail, "; ")
	if err := r.finish(ctx, row, id, append([]purchaseResult{crash}, results...)); err != nil {
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
	va := &api{base: victim.URL, token: r.cl.AdminToken, hc: r.apis[0].hc}
	wait := r.async(ctx, va, id, "lock", time.Second)
	l, held := r.awaitHolder(ctx, va, victim, id)
	victim.Kill()
	_ = wait() // its connection is cut by the crash
	row = pitfallRow{Case: "setnx-expire", Strategy: "lock", Role: "fix", Lesson: "a lease set with the lock expires by itself: a dead holder costs one lease, not the item"}
	if !held {
		row.Verdict = "NO HOLDER"
		row.Detail = "the instance to crash was never seen holding the lock"
		return r.finish(ctx, row, id, nil)
	}
	results = r.burst(ctx, id, "lock", 6, 0)
	row.Detail = fmt.Sprintf("holder pid %d killed (SIGKILL) holding token %d; its lease ran out; the others sold", victim.PID(), l.Token)
	if n := countCode(results, "lock_timeout"); n > 0 {
		row.Verdict = "BLOCKED"
	}
	return r.finish(ctx, row, id, results)
}

// awaitHolder polls an instance's /api/debug/locks until it holds item id's lock (bounded).
func (r *pitfallRun) awaitHolder(ctx context.Context, a *api, in *Instance, id int64) (heldLock, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		dl, found, err := a.locks(ctx)
		if err == nil && found && dl.PID == in.PID() {
			for _, l := range dl.Locks {
				if l.ItemID == id {
					return l, true
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return heldLock{}, false
}

// noTTLKeys returns the keys under prefix that name item id's lock and have no TTL.
func (r *pitfallRun) noTTLKeys(ctx context.Context, prefix string, id int64) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("GET /api/strategies gives no redis_key_prefix for setnx-expire")
	}
	var keys []string
	iter := r.rdb.Scan(ctx, 0, prefix+"*item:"+strconv.FormatInt(id, 10)+"}", 100).Iterator()
	for iter.Next(ctx) {
		ttl, err := r.rdb.Do(ctx, "TTL", iter.Val()).Int()
		if err != nil {
			return nil, err
		}
		if ttl == -1 {
			keys = append(keys, iter.Val())
		}
	}
	return keys, iter.Err()
}

func countCode(results []purchaseResult, code string) int {
	n := 0
	for _, res := range results {
		if res.Code == code {
			n++
		}
	}
	return n
}

// delRelease: A takes the lock of the last unit and works for 1s; its 500ms lease runs out and
// B (one of two waiting buyers, 300ms of work each) takes the lock; A's client gives up at
// 650ms (A writes nothing) and A's release runs: a plain DEL deletes B's lock, C takes it at
// once, reads the stock B has not written yet, and both write. The fix: the same script with
// the owner-checked release (fixed-lease: B's and C's work fits in the lease).
func (r *pitfallRun) delRelease(ctx context.Context) error {
	for _, tc := range []struct{ strategy, role, lesson string }{
		{"del-release", "pitfall", "release only your own lock: a plain DEL after the lease ran out deletes the next holder's lock, and a third buyer joins the second"},
		{"fixed-lease", "fix", "an owner-checked compare-and-delete (GET == token, then DEL, in one script) leaves the next holder's lock alone"},
	} {
		id, err := r.reset(ctx, 1)
		if err != nil {
			return err
		}
		actx, hangUp := context.WithTimeout(ctx, pitfallLease+150*time.Millisecond)
		a := r.async(actx, r.apis[0], id, tc.strategy, time.Second)
		time.Sleep(100 * time.Millisecond) // A holds the lock
		b := r.async(ctx, r.apis[1%len(r.apis)], id, tc.strategy, 300*time.Millisecond)
		c := r.async(ctx, r.apis[2%len(r.apis)], id, tc.strategy, 300*time.Millisecond)
		results := []purchaseResult{a(), b(), c()}
		hangUp()
		row := pitfallRow{Case: "del-release", Strategy: tc.strategy, Role: tc.role, Lesson: tc.lesson,
			Detail: fmt.Sprintf("A (1s of work, %s lease) hangs up at %s after B took over: %s",
				pitfallLease, pitfallLease+150*time.Millisecond, answerOf(results[0]))}
		if err := r.finish(ctx, row, id, results); err != nil {
			return err
		}
	}
	return nil
}

func answerOf(res purchaseResult) string {
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
	for _, tc := range []struct{ strategy, role, lesson string }{
		{"fixed-lease", "pitfall", "a fixed lease shorter than the work lets a second holder in beside the first: renew it, and notice when it is lost"},
		{"lock", "fix", "the watchdog renews the lease while the holder works (and tells it when the lock is lost)"},
		{"lock+guard", "fix", "the fence and the guard make a stale holder's write fail, whatever happened to the lock"},
	} {
		id, err := r.reset(ctx, 2)
		if err != nil {
			return err
		}
		results := r.burst(ctx, id, tc.strategy, 4, 700*time.Millisecond)
		row := pitfallRow{Case: "fixed-lease", Strategy: tc.strategy, Role: tc.role, Lesson: tc.lesson,
			Detail: fmt.Sprintf("4 buyers of 2 units, 700ms of work each, %s lease", pitfallLease)}
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
	results := r.burst(ctx, id, "optimistic", 40, 20*time.Millisecond)
	retries := 0
	for _, res := range results {
		retries += res.Receipt.Retries
	}
	row := pitfallRow{Case: "optimistic", Strategy: "optimistic", Role: "fix",
		Lesson: "no lock: the version check makes a stale write change nothing; under contention every lost race costs its work again",
		Detail: fmt.Sprintf("40 buyers of 20 units, 20ms of work: %d version conflicts retried by the sales", retries)}
	return r.finish(ctx, row, id, results)
}

// redisStock: ten units; three sales, SAVE, four more sales, then Redis is killed and
// restarted from that snapshot: the mirror says seven left where three are. Then ten more
// purchases, one after the other.
func (r *pitfallRun) redisStock(ctx context.Context) error {
	for _, tc := range []struct{ strategy, role, lesson string }{
		{"redis-stock", "pitfall", "Redis is not the system of record: a restart from an older snapshot (or a failover) brings sold units back, and they sell again"},
		{"watch", "pitfall", "WATCH/MULTI/EXEC is exact on the mirror, and loses with it: the check is only as durable as Redis"},
		{"redis-stock+guard", "fix", "let the database's conditional update have the last word; give refused units back to the mirror"},
	} {
		id, err := r.reset(ctx, 10)
		if err != nil {
			return err
		}
		var results []purchaseResult
		results = append(results, r.sequential(ctx, id, tc.strategy, 3)...)
		if err := r.rdb.Save(ctx).Err(); err != nil {
			return fmt.Errorf("redis SAVE: %w", err)
		}
		results = append(results, r.sequential(ctx, id, tc.strategy, 4)...)
		if err := r.cl.Redis.RestartFromSnapshot(); err != nil {
			return err
		}
		for _, a := range r.apis {
			if err := waitReady(ctx, a); err != nil {
				return err
			}
		}
		key := r.info[tc.strategy].RedisKeyPrefix + strconv.FormatInt(id, 10)
		mirrored, err := r.rdb.Get(ctx, key).Int()
		if err != nil {
			return fmt.Errorf("GET %s after the restart: %w", key, err)
		}
		after := r.sequential(ctx, id, tc.strategy, 10)
		results = append(results, after...)
		row := pitfallRow{Case: "redis-stock", Strategy: tc.strategy, Role: tc.role, Lesson: tc.lesson,
			Detail: fmt.Sprintf("SAVE after 3 sales, 4 more, Redis restarted from the snapshot: mirror %d, truth 3; %d sold after",
				mirrored, countCode(after, ""))}
		if err := r.finish(ctx, row, id, results); err != nil {
			return err
		}
	}
	return nil
}

// sequential sends n purchases one after the other, round-robin over the instances; one
// answered unavailable (a connection that died with the old Redis) is sent again once.
func (r *pitfallRun) sequential(ctx context.Context, id int64, strategy string, n int) []purchaseResult {
	var out []purchaseResult
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
func waitReady(ctx context.Context, a *api) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := a.ready(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready after the Redis restart: %w", a.base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quietRedis discards go-redis's own log lines: while the scenario restarts Redis, the pool
// logs every refused dial, and the scenario reports what matters itself.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// writePitfalls prints the table and returns the exit status: 1 when a pitfall did not show its
// failure or a fix broke an invariant.
func writePitfalls(w io.Writer, rows []pitfallRow) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tSTRATEGY\tROLE\tEXPECTED\tVERDICT\tSOLD/STOCK\tANSWERS\tLESSON")
	code := 0
	for _, row := range rows {
		mark := ""
		if !row.OK {
			mark, code = "  <- UNEXPECTED", 1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\t%d/%d\t%s\t%s\n", row.Case, row.Strategy, row.Role, row.expected(),
			row.Verdict, mark, row.Sold, row.Initial, answers(row.Answers), row.Lesson)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "%-12s %-18s %s\n", row.Case, row.Strategy, row.Detail)
	}
	return code
}

func answers(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
