package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// The lockless cases of -scenario pitfalls: an optimistic version check, and the stock kept
// in Redis (pitfalls.go runs them).

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
