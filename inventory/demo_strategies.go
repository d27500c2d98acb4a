//go:build !nodemo

package inventory

import (
	"context"
	"errors"
	"fmt"
)

// pitfallLock is the lock strategy's read-check-work-write, unconditional write, over one of
// the broken locks of package pitfalls (setnx-expire, del-release, fixed-lease). Those locks
// never notice a loss: their Held.Context ends only on release, so whatever they let through
// is written.
type pitfallLock struct {
	deps
	locker Locker
	name   string
}

func (s pitfallLock) buy(ctx context.Context, p purchase) (Receipt, error) {
	held, err := s.obtainObserved(ctx, s.locker, p, s.name, 0)
	if err != nil {
		return Receipt{}, err
	}
	defer s.release(ctx, held)
	return readCheckWorkWrite(ctx, held.Context(ctx), s.deps, p, s.name, held.Token())
}

// maxOptimisticRetries bounds the version conflicts of one optimistic purchase; past it the
// purchase fails with ErrOverloaded.
const maxOptimisticRetries = 100

// optimistic takes no lock: it reads the stock and the row's version, checks, works, then
// writes the stock it computed only if the version (and the stock) are still what it read;
// otherwise it starts again from the read. Safe; under contention every lost race costs its
// work again, and the retries are counted in the receipt.
type optimistic struct{ deps }

func (s optimistic) buy(ctx context.Context, p purchase) (Receipt, error) {
	for retries := 0; ; retries++ {
		r, err := s.store.readVersion(ctx, p.itemID)
		if err != nil {
			return Receipt{}, err
		}
		if err := checkStock(p.itemID, r.Stock, p.quantity); err != nil {
			return Receipt{}, err
		}
		if err := s.sleep(ctx, p.work); err != nil {
			return Receipt{}, err
		}
		if err := p.beforeWrite(ctx, StrategyOptimistic); err != nil {
			return Receipt{}, err
		}
		rec, ok, err := s.store.writeVersioned(ctx, p, StrategyOptimistic, r)
		if err != nil {
			return Receipt{}, err
		}
		if ok {
			rec.Retries = retries
			return rec, nil
		}
		if retries >= maxOptimisticRetries {
			return Receipt{}, fmt.Errorf("%w: item %d: %d version conflicts in a row", ErrOverloaded, p.itemID, retries+1)
		}
	}
}

// redisStock sells from the stock mirrored in Redis: one Lua script (or, for watch, a
// WATCH/MULTI/EXEC transaction) checks and decrements it, then the work, then the order is
// written to the database. Without the guard the database takes what Redis decided
// (UPDATE ... SET stock = stock - n): when Redis loses its latest writes (a restart from an
// older snapshot, a failover to a lagging replica) the mirror is back above the truth and sells
// again what was sold. With the guard the database's conditional update has the last word;
// units the database refuses are given back to the mirror (the compensating increment).
type redisStock struct {
	deps
	mirror StockMirror
	name   string
	guard  bool // the database's conditional update decides
	watch  bool // WATCH/MULTI/EXEC instead of the Lua script
}

func (s redisStock) buy(ctx context.Context, p purchase) (Receipt, error) {
	if s.mirror == nil {
		return Receipt{}, fmt.Errorf("%w: no Redis stock mirror configured", ErrUnavailable)
	}
	retries, err := s.take(ctx, p)
	if errors.Is(err, ErrNotMirrored) {
		// Not seeded yet (no reset since Redis started): mirror the database's stock, once.
		if err = s.init(ctx, p.itemID); err == nil {
			var more int
			more, err = s.take(ctx, p)
			retries += more
		}
	}
	if err != nil {
		return Receipt{}, err
	}
	// The units are taken from the mirror: from here, every failure gives them back.
	rec, err := s.afterTake(ctx, p)
	if err != nil {
		if gerr := s.mirror.Give(context.WithoutCancel(ctx), p.itemID, p.quantity); gerr != nil {
			s.log.WarnContext(ctx, "compensating increment failed: the mirror stays below the truth",
				"item", p.itemID, "quantity", p.quantity, "strategy", s.name, "err", gerr)
		}
		return Receipt{}, err
	}
	rec.Retries = retries
	return rec, nil
}

func (s redisStock) take(ctx context.Context, p purchase) (retries int, err error) {
	if s.watch {
		_, retries, err = s.mirror.TakeWatched(ctx, p.itemID, p.quantity)
		return retries, err
	}
	_, err = s.mirror.Take(ctx, p.itemID, p.quantity)
	return 0, err
}

func (s redisStock) init(ctx context.Context, itemID int64) error {
	r, err := s.store.read(ctx, itemID)
	if err != nil {
		return err
	}
	_, err = s.mirror.Init(ctx, itemID, r.Stock)
	return err
}

func (s redisStock) afterTake(ctx context.Context, p purchase) (Receipt, error) {
	if err := s.sleep(ctx, p.work); err != nil {
		return Receipt{}, err
	}
	if err := p.beforeWrite(ctx, s.name); err != nil {
		return Receipt{}, err
	}
	if s.guard {
		return s.store.writeOne(ctx, p, s.name, 0)
	}
	return s.store.writeTaken(ctx, p, s.name)
}
