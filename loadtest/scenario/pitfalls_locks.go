package scenario

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
)

// The lock cases of -scenario pitfalls: setnx-expire, del-release and fixed-lease
// (pitfalls.go runs them).

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
