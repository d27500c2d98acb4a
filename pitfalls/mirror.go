//go:build !nodemo

package pitfalls

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/inventory"
)

// MaxWatchRetries bounds the aborted transactions of one TakeWatched.
const MaxWatchRetries = 100

// Mirror is the flash-sale pattern's copy of the stock in Redis: one string per item,
// prefix+id. It implements inventory.StockMirror.
type Mirror struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ inventory.StockMirror = (*Mirror)(nil)

// NewMirror returns the stock mirror under prefix (inventory.StockKeyPrefix).
func NewMirror(rdb redis.UniversalClient, prefix string) *Mirror {
	return &Mirror{rdb: rdb, prefix: prefix}
}

// Key returns the Redis key of itemID's mirrored stock.
func (m *Mirror) Key(itemID int64) string { return m.prefix + strconv.FormatInt(itemID, 10) }

// Reset deletes every mirrored stock (SCAN over the prefix, on every master of a Cluster) and
// writes stocks: the catalogue reset calls it. Not atomic: a purchase between the two steps
// mirrors its item from the database (Init), which Reset then sets to the same stock.
func (m *Mirror) Reset(ctx context.Context, stocks map[int64]int) error {
	if err := deleteMatching(ctx, m.rdb, m.prefix+"*"); err != nil {
		return unavailable("seed: delete", err)
	}
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, stock := range stocks {
			p.Set(ctx, m.Key(id), stock, 0)
		}
		return nil
	})
	return unavailable("seed", err)
}

// Init sets itemID's mirrored stock when it has none.
func (m *Mirror) Init(ctx context.Context, itemID int64, stock int) (bool, error) {
	ok, err := m.rdb.SetNX(ctx, m.Key(itemID), stock, 0).Result()
	return ok, unavailable("init", err)
}

// take is the flash-sale script: check and decrement in one step. It returns the remaining
// stock, -1 when the quantity does not fit (ARGV[2] = the stock seen) or -2 when the item is
// not mirrored.
var take = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return {-2, 0} end
local stock = tonumber(v)
local q = tonumber(ARGV[1])
if stock < q then return {-1, stock} end
return {redis.call('DECRBY', KEYS[1], q), 0}`)

// Take checks and decrements itemID's mirrored stock with one Lua script.
func (m *Mirror) Take(ctx context.Context, itemID int64, quantity int) (int, error) {
	res, err := take.Run(ctx, m.rdb, []string{m.Key(itemID)}, quantity).Int64Slice()
	if err != nil {
		return 0, unavailable("take", err)
	}
	switch res[0] {
	case -2:
		return 0, fmt.Errorf("%w: item %d", inventory.ErrNotMirrored, itemID)
	case -1:
		return 0, notFit(itemID, int(res[1]), quantity)
	}
	return int(res[0]), nil
}

// TakeWatched checks and decrements itemID's mirrored stock with WATCH, GET, MULTI, DECRBY,
// EXEC, and starts again when EXEC aborts because another client changed the key.
func (m *Mirror) TakeWatched(ctx context.Context, itemID int64, quantity int) (remaining, retries int, err error) {
	key := m.Key(itemID)
	for ; ; retries++ {
		err = m.rdb.Watch(ctx, func(tx *redis.Tx) error {
			stock, err := tx.Get(ctx, key).Int()
			if errors.Is(err, redis.Nil) {
				return fmt.Errorf("%w: item %d", inventory.ErrNotMirrored, itemID)
			}
			if err != nil {
				return err
			}
			if stock < quantity {
				return notFit(itemID, stock, quantity)
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.DecrBy(ctx, key, int64(quantity))
				return nil
			})
			remaining = stock - quantity
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
		if retries >= MaxWatchRetries {
			return 0, retries, fmt.Errorf("%w: item %d: %d aborted transactions in a row", inventory.ErrOverloaded, itemID, retries+1)
		}
	}
	if err != nil {
		var domain bool
		for _, s := range []error{inventory.ErrNotMirrored, inventory.ErrSoldOut, inventory.ErrInsufficientStock} {
			domain = domain || errors.Is(err, s)
		}
		if !domain {
			err = unavailable("watch", err)
		}
		return 0, retries, err
	}
	return remaining, retries, nil
}

// Give adds quantity back to itemID's mirrored stock.
func (m *Mirror) Give(ctx context.Context, itemID int64, quantity int) error {
	return unavailable("give", m.rdb.IncrBy(ctx, m.Key(itemID), int64(quantity)).Err())
}

func notFit(itemID int64, stock, quantity int) error {
	if stock <= 0 {
		return fmt.Errorf("%w: item %d (Redis stock mirror)", inventory.ErrSoldOut, itemID)
	}
	return fmt.Errorf("%w: item %d has %d left in the Redis stock mirror, %d asked", inventory.ErrInsufficientStock, itemID, stock, quantity)
}

func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: redis stock mirror: %s: %w", inventory.ErrUnavailable, op, err)
}
