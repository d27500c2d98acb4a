package inventory

import (
	"context"
	"errors"
)

// What lock+guard and redlock+guard do when the lock service is unavailable
// (Config.OnRedisDown, the storefront's --on-redis-down).
const (
	OnRedisDownFail  = "fail"  // answer ErrUnavailable (503): the default
	OnRedisDownGuard = "guard" // sell through the database guard alone, marked degraded
)

// ValidOnRedisDown reports whether v is an OnRedisDown policy ("" is the default, fail).
func ValidOnRedisDown(v string) bool {
	return v == "" || v == OnRedisDownFail || v == OnRedisDownGuard
}

// sellsDegraded reports whether a purchase whose lock (or admission permit) failed with err
// goes on without it under policy: only when the lock service is unavailable (a lock held
// by another, ErrLockTimeout, is contention, not an outage) and the policy is guard.
func sellsDegraded(policy string, err error) bool {
	return policy == OnRedisDownGuard && errors.Is(err, ErrUnavailable)
}

// sellDegraded is the fallback of a purchase whose lock could not be obtained because the
// lock service is unavailable (the Locker's error wraps ErrUnavailable), under
// --on-redis-down=guard. It spends the purchase's work under ctx, then makes the guarded
// write alone: UPDATE ... WHERE stock >= quantity and the order in one transaction, the
// fence untouched (no token was issued: the order's fence_token is 0 and the item's
// fence_token stays what the last lock holder wrote, so the floor of the next lock is
// unchanged). The order keeps the strategy's name and is stored with degraded = true (the
// receipt shows it; handlers count it in a metric).
//
// Safe: the guard alone never oversells and never loses an update, because it writes a delta
// that the database checks; a lock holder writing at the same time is checked by the same
// guard. It is offered only to the strategies that write through the guard (lock+guard,
// redlock+guard): lock computes the stock it writes from an earlier read and would
// overwrite concurrent sales without its lock, so it never degrades.
func sellDegraded(ctx context.Context, d deps, p purchase, name string) (Receipt, error) {
	if err := d.sleep(ctx, p.work); err != nil {
		return Receipt{}, err
	}
	if err := p.beforeWrite(ctx, name); err != nil {
		return Receipt{}, err
	}
	p.degraded = true
	return d.store.writeOne(ctx, p, name, 0)
}
