package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/pgproc"
	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/testutil"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

// The sales gap after a kill -9 of the storefront that holds the hot item's lock, with the
// production defaults (--lock-lease 30s, --lock-wait 5s, --redis-call-timeout 250ms): three
// storefronts on one database and one redis-server, buyers spread round-robin over the live
// ones. lock+guard's waiters take the dead process's lock over (locking.WithTakeover) once its
// process key lapses, about 1s after the kill: the test fails past 3s. `lock`, whose writes are
// not fenced, waits out the lease (here 4s, to keep the test short). STOCKGUARD_TAKEOVER_KILLS
// sets the kills per case (default 1; docs/measured.md's figures are of 20).

func TestKilledHolderTakenOver(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	bin := buildBinary(t)
	kills := envInt("STOCKGUARD_TAKEOVER_KILLS", 1)
	for _, tc := range []struct {
		name     string
		postgres bool
		carts    bool
	}{{"sqlite purchases", false, false}, {"sqlite carts", false, true}, {"postgres purchases", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			k := startKillRun(t, bin, tc.postgres, inventory.StrategyLockGuard)
			gaps := k.run(t, kills, tc.carts)
			t.Logf("%s: sales gaps after kill -9 of the holder: %v", tc.name, gaps)
			for i, g := range gaps {
				assert.Less(t, g, 3*time.Second, "kill %d: the dead holder's lock taken over", i+1)
			}
			k.checkStock(t)
			k.checkFenceOrder(t)
		})
	}
	t.Run("frozen holder", func(t *testing.T) {
		// SIGSTOP for 5s mid-hold, then SIGCONT: the waiters take the lock over after about 1s,
		// and the frozen holder's write, if it comes, is refused by the fence or commits before
		// the newer token's first write; never after it. Inside its transaction the frozen
		// holder also holds SQLite's write lock, which the others wait for until their busy
		// timeout (--db-statement-timeout, 5s): that gap is the database's, not the lock's.
		k := startKillRun(t, bin, false, inventory.StrategyLockGuard)
		gaps := k.runWith(t, kills, false, k.freezeHolder(5*time.Second))
		t.Logf("frozen holder: sales gaps after SIGSTOP (5s) of the holder: %v", gaps)
		k.checkStock(t)
		k.checkFenceOrder(t)
	})
	t.Run("clean shutdown", func(t *testing.T) {
		// SIGTERM: the holder finishes its hold, gives every lock back, and the next holder,
		// woken by the release message, sells at once.
		k := startKillRun(t, bin, false, inventory.StrategyLockGuard)
		gaps := k.runWith(t, kills, false, func(t *testing.T) (int, time.Time) {
			victim, at := k.holder(t, false) // frozen while it holds the lock, then terminated
			p := k.procs[victim]
			p.dead.Store(true)
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
			<-p.exited
			np := startKillable(t, k.bin, k.env, k.args)
			k.mu.Lock()
			k.procs[victim] = np
			k.mu.Unlock()
			return victim, at
		})
		t.Logf("clean shutdown: sales gaps after SIGTERM of the holder: %v", gaps)
		for i, g := range gaps {
			assert.Less(t, g, 3*time.Second, "shutdown %d: the locks were given back", i+1)
		}
		k.checkStock(t)
	})
	t.Run("lock waits out the lease", func(t *testing.T) {
		const lease = 4 * time.Second
		k := startKillRun(t, bin, false, inventory.StrategyLock, "--lock-lease", lease.String(), "--lock-wait", "10s")
		gaps := k.run(t, 1, false)
		t.Logf("lock: sales gap after kill -9 of the holder: %v (lease %v)", gaps, lease)
		assert.Greater(t, gaps[0], lease/2, "an unfenced holder's lock is not taken over: its lease runs out first")
	})
}

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n <= 0 {
		return def
	}
	return n
}

// killRun is three storefront processes selling one hot item.
type killRun struct {
	bin, strategy string
	args          []string
	env           []string
	rdb           *redis.Client
	procs         [3]*killable
	item, other   int64
	mu            sync.Mutex
	sales         []sale // every 201, in the order answered
	unknown       atomic.Int64
}

type sale struct {
	sent, at time.Time // the request sent, its 201 read
	server   int
	units    int
}

func startKillRun(t *testing.T, bin string, postgres bool, strategy string, extra ...string) *killRun {
	rs := redistest.Start(t)
	k := &killRun{bin: bin, strategy: strategy, rdb: rs.Client(t)}
	k.env = []string{"REDIS_URL=" + rs.URL(), "ADMIN_TOKEN=kill-token"}
	if postgres {
		pg, err := pgproc.Start(pgproc.Options{})
		require.NoError(t, err, "the PostgreSQL backend cannot start")
		t.Cleanup(pg.Close)
		url, err := pg.CreateDatabase(context.Background(), "kill")
		require.NoError(t, err)
		k.env = append(k.env, "DATABASE_URL="+url)
	} else {
		k.args = []string{"--db", filepath.Join(t.TempDir(), "kill.db")}
	}
	k.args = append(k.args, "--addr", "127.0.0.1:0", "--strategy", strategy, "--log-level", "info", "--shutdown-timeout", "5s")
	k.args = append(k.args, extra...)
	for i := range k.procs {
		k.procs[i] = startKillable(t, bin, k.env, k.args)
	}
	var items []item
	reset := `{"items":[{"sku":"HOT","name":"hot","stock":1000000,"price_cents":1},{"sku":"B","name":"b","stock":1000000,"price_cents":1}]}`
	require.Equal(t, http.StatusOK, k.procs[0].call(t, "POST", "/api/admin/reset", reset, &items, "Authorization: Bearer kill-token"))
	k.item, k.other = items[0].ID, items[1].ID
	return k
}

// run sells with 24 buyers (carts of the hot item and another, with carts) and kills the hot
// item's holder kills times, restarting it each time; it returns each kill's sales gap: from
// the kill to the next sale of the hot item answered by a survivor.
func (k *killRun) run(t *testing.T, kills int, carts bool) []time.Duration {
	return k.runWith(t, kills, carts, func(t *testing.T) (int, time.Time) {
		victim, killed := k.killHolder(t)
		p := startKillable(t, k.bin, k.env, k.args)
		k.mu.Lock()
		old := k.procs[victim]
		k.procs[victim] = p
		k.mu.Unlock()
		old.dead.Store(true)
		return victim, killed
	})
}

// freezeHolder returns a fault for runWith: the holder frozen (SIGSTOP) for d, then resumed.
func (k *killRun) freezeHolder(d time.Duration) func(t *testing.T) (int, time.Time) {
	return func(t *testing.T) (int, time.Time) {
		victim, at := k.holder(t, false)
		p := k.procs[victim]
		go func() {
			time.Sleep(d)
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}()
		return victim, at
	}
}

// runWith sells as run does and applies fault kills times; fault returns its victim and when it
// struck.
func (k *killRun) runWith(t *testing.T, kills int, carts bool, fault func(t *testing.T) (int, time.Time)) []time.Duration {
	var (
		wg      sync.WaitGroup
		stopped atomic.Bool // the buyers send no more; the requests in flight complete
		next    atomic.Int64
	)
	defer func() { stopped.Store(true); wg.Wait() }()
	for w := range 24 {
		wg.Go(func() { k.buy(&stopped, &next, w, carts) })
	}
	waitSales := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			k.mu.Lock()
			got := len(k.sales)
			k.mu.Unlock()
			if got >= n {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("fewer than %d sales in 30s", n)
	}
	var gaps []time.Duration
	for range kills {
		k.mu.Lock()
		before := len(k.sales)
		k.mu.Unlock()
		waitSales(before + 200)
		victim, struck := fault(t)
		gap, ok := k.gapAfter(victim, struck, 40*time.Second)
		require.True(t, ok, "no survivor sold the hot item within 40s of the fault")
		gaps = append(gaps, gap)
	}
	return gaps
}

// buy is one buyer: round-robin over the live storefronts, a purchase of the hot item (or a
// cart of it and the other item) at a time, recording every 201.
func (k *killRun) buy(stopped *atomic.Bool, next *atomic.Int64, w int, carts bool) {
	client := &http.Client{Timeout: 15 * time.Second}
	defer client.CloseIdleConnections()
	for !stopped.Load() {
		i := int(next.Add(1)) % len(k.procs)
		k.mu.Lock()
		p := k.procs[i]
		k.mu.Unlock()
		if p.dead.Load() {
			continue
		}
		path, body, units := fmt.Sprintf("/api/items/%d/purchase", k.item), `{"quantity":1}`, 1
		if carts && w%2 == 0 {
			path, body = "/api/checkout", fmt.Sprintf(`{"lines":[{"item_id":%d,"quantity":1},{"item_id":%d,"quantity":1}]}`, k.item, k.other)
		}
		req, _ := http.NewRequest("POST", p.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		sent := time.Now()
		res, err := client.Do(req)
		if err != nil {
			k.unknown.Add(int64(units)) // the storefront died with the request: it may have sold
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusCreated {
			k.mu.Lock()
			k.sales = append(k.sales, sale{sent: sent, at: time.Now(), server: i, units: units})
			k.mu.Unlock()
		}
	}
}

// killHolder kills the storefront that holds the hot item's lock (holder), with SIGKILL:
// nothing released. It returns the victim and when it was killed.
func (k *killRun) killHolder(t *testing.T) (int, time.Time) {
	return k.holder(t, true)
}

// holder freezes the storefront whose process holds the hot item's lock and, if it still
// holds it once frozen, kills it (kill) or leaves it frozen; otherwise it lets it go on and
// looks again. It returns the victim and when it was frozen or killed.
func (k *killRun) holder(t *testing.T, kill bool) (int, time.Time) {
	hash, _ := inventory.LockKeys(inventory.LockKeyPrefix, inventory.ItemLockName(k.item))
	for range 500 {
		owners, err := k.rdb.HKeys(context.Background(), hash).Result()
		require.NoError(t, err)
		if len(owners) == 1 {
			if v := k.holderOf(owners[0]); v >= 0 {
				p := k.procs[v]
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
				// A release the holder wrote before it stopped must reach Redis before the
				// question whether the lock is still held: once every thread is stopped, what
				// it wrote is in Redis's socket buffer (loopback), and Redis runs it in the event
				// loop's turn that sees it; two round trips of ours span a whole turn after that.
				require.True(t, procutil.WaitStopped(p.cmd.Process.Pid, 5*time.Second), "every thread stopped")
				require.NoError(t, storeapi.Settle(context.Background(), k.rdb))
				still, err := k.rdb.HExists(context.Background(), hash, owners[0]).Result()
				require.NoError(t, err)
				if still && !kill {
					return v, time.Now()
				}
				if still {
					p.dead.Store(true)
					require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
					killed := time.Now()
					<-p.exited
					return v, killed
				}
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("never found a storefront holding the hot item's lock")
	return 0, time.Time{}
}

// holderOf returns the live storefront whose process the lock's owner names (its start-up
// log line "lock process" carries the id), or -1.
func (k *killRun) holderOf(owner string) int {
	proc, _ := locking.HolderProcess(owner)
	if proc == "" {
		return -1
	}
	for i, p := range k.procs {
		if !p.dead.Load() && strings.Contains(p.logs.String(), proc) {
			return i
		}
	}
	return -1
}

// gapAfter waits for the first sale of the hot item by a survivor whose request was sent after
// killed, and returns how long after the kill it was answered. A request sent before the kill
// may have been sold by a survivor's hold before the kill, its answer still on its way: only a
// request sent after it is surely sold under a lock taken after the kill (an upper bound of
// the gap, by up to one request's time).
func (k *killRun) gapAfter(victim int, killed time.Time, limit time.Duration) (time.Duration, bool) {
	deadline := killed.Add(limit)
	for time.Now().Before(deadline) {
		k.mu.Lock()
		first := time.Time{}
		for _, s := range slices.Backward(k.sales) {
			if s.at.Before(killed) {
				break
			}
			if s.server != victim && s.sent.After(killed) && (first.IsZero() || s.at.Before(first)) {
				first = s.at
			}
		}
		k.mu.Unlock()
		if !first.IsZero() {
			return first.Sub(killed), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, false
}

// checkStock checks the invariants after the run: nothing oversold (stock never below zero,
// every unit taken from stock sold), and every sale answered 201 has its order, beside at most
// the requests that died with their storefront (their outcome is unknown to the buyer).
func (k *killRun) checkStock(t *testing.T) {
	var stats []struct {
		ItemID       int64 `json:"item_id"`
		InitialStock int   `json:"initial_stock"`
		Stock        int   `json:"stock"`
		SoldUnits    int   `json:"sold_units"`
	}
	p := k.procs[0]
	for _, q := range k.procs {
		if !q.dead.Load() {
			p = q
		}
	}
	require.Equal(t, http.StatusOK, p.call(t, "GET", "/api/stats", "", &stats))
	answered := 0
	k.mu.Lock()
	for _, s := range k.sales {
		answered += s.units
	}
	k.mu.Unlock()
	for _, st := range stats {
		if st.ItemID != k.item {
			continue
		}
		assert.GreaterOrEqual(t, st.Stock, 0, "never oversold")
		assert.Equal(t, st.InitialStock-st.Stock, st.SoldUnits, "every unit taken from stock is sold")
		assert.GreaterOrEqual(t, st.SoldUnits, answered, "every 201 has its order")
		assert.LessOrEqual(t, int64(st.SoldUnits), int64(answered)+k.unknown.Load(), "no order without a buyer")
	}
}

// checkFenceOrder checks DESIGN §12's fence order on the hot item's order lines: in commit
// order (the stock left after each line, descending), their fence tokens never go down: once
// a newer token committed, no older one did.
func (k *killRun) checkFenceOrder(t *testing.T) {
	dsn := ""
	for _, e := range k.env {
		if v, ok := strings.CutPrefix(e, "DATABASE_URL="); ok {
			dsn = v
		}
	}
	for i, a := range k.args {
		if a == "--db" {
			dsn = k.args[i+1]
		}
	}
	db, err := models.Open(context.Background(), dsn)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	defer sqlDB.Close()
	var lines []models.OrderLine
	require.NoError(t, db.Where("item_id = ?", k.item).Order("remaining DESC").Find(&lines).Error)
	require.NotEmpty(t, lines)
	for i := 1; i < len(lines); i++ {
		if lines[i].FenceToken < lines[i-1].FenceToken {
			t.Errorf("order line %d (stock left %d) committed with token %d after token %d", lines[i].ID,
				lines[i].Remaining, lines[i].FenceToken, lines[i-1].FenceToken)
			return
		}
	}
}

// killable is a storefront process that a test may freeze and kill.
type killable struct {
	cmd    *exec.Cmd
	url    string
	logs   *logSink
	dead   atomic.Bool
	exited chan struct{}
}

// startKillable runs the storefront binary with env as its whole environment and waits for it
// to listen; it is interrupted (or found dead) when t ends.
func startKillable(t *testing.T, bin string, env, args []string) *killable {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	p := &killable{cmd: cmd, logs: &logSink{addrs: make(chan string, 1)}, exited: make(chan struct{})}
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = p.logs.Write(append(sc.Bytes(), '\n'))
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("storefront did not stop")
		}
	})
	select {
	case addr := <-p.logs.addrs:
		p.url = "http://" + strings.TrimSpace(addr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no listening line after 30s:\n%s", p.logs)
	}
	return p
}

// call sends one request to the storefront and decodes its JSON answer into out.
func (p *killable) call(t *testing.T, method, path, body string, out any, headers ...string) int {
	s := &server{t: t, url: p.url, logs: p.logs}
	return s.call(method, path, body, out, headers...)
}
