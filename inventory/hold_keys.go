package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Idempotency keys of holds.
//
// A hold placed with a key stores it (holds.idempotency_key, unique, NULL when none) with the
// placement's fingerprint: its merged lines and its ttl (holdFingerprint; a placement that
// names no ttl counts as Config.HoldTTL). Holds share the orders' key space: one key names one
// order or one hold. So
//
//   - a placement under a key that placed a hold with the same fingerprint answers that hold as
//     it stands now (Replayed), and sets nothing aside;
//   - a placement under a key that placed another hold, or that an order holds (a purchase's,
//     a checkout's), is ErrIdempotencyConflict, as a purchase under another purchase's key is;
//   - a purchase or checkout under a key that placed a hold is ErrIdempotencyConflict
//     (Service.replay, Service.replayCart ask holdKeyConflict).
//
// Concurrent placements under one key: in one process the second waits for the first (the
// keyed mutex every keyed request takes) and replays it; across processes both may write, the
// unique index keeps the second hold out (INSERT ... ON CONFLICT (idempotency_key) DO NOTHING),
// its transaction rolls back with its stock updates, and it replays the first. A placement
// checks, in its own write transaction, that no order holds its key. A purchase checks holds
// before it writes, not in its write transaction (the coalesced write of batch.go knows only
// orders): a purchase and a hold sent under one key at the same moment to two processes can
// therefore both succeed; each then replays as itself.

// holdFingerprint identifies a hold placement: "hold:<item>x<quantity>,...;ttl=<ttl>", the
// lines merged and ascending by item.
func holdFingerprint(c cart, ttl time.Duration) string {
	return "hold:" + strings.TrimPrefix(c.fp, "cart:") + ";ttl=" + ttl.String()
}

// describeHoldFingerprint shows what placement a holdFingerprint stands for.
func describeHoldFingerprint(fp string) string {
	lines, ttl, _ := strings.Cut(strings.TrimPrefix(fp, "hold:"), ";ttl=")
	return "a hold of " + lines + " (item x quantity) for " + ttl
}

// placeHoldKeyed is PlaceHold under p.key: the replay of the key's hold, or a new hold.
func (s *Service) placeHoldKeyed(ctx context.Context, p holdPlacement) (StockHold, error) {
	unlock, err := s.keys.lock(ctx, p.key)
	if err != nil {
		return StockHold{}, fmt.Errorf("%w: waiting for an earlier request with the same idempotency key: %w", ErrLockTimeout, err)
	}
	defer unlock()
	if h, ok, err := s.replayHold(ctx, p); ok || err != nil {
		return h, err
	}
	h, err := s.placeHold(ctx, p)
	if err == nil {
		return h, nil
	}
	// Another process may have placed a hold (or stored an order) under this key since the
	// lookup: our insert then found the key taken and rolled back (errDuplicateKey), or that
	// hold took the last units and ours was short. The key's hold, if any, is the answer. A
	// commit whose answer was lost is resolved here too.
	h, ok, rerr := s.replayHold(context.WithoutCancel(ctx), p)
	switch {
	case ok || errors.Is(rerr, ErrIdempotencyConflict):
		return h, rerr
	case errors.Is(err, errDuplicateKey):
		return StockHold{}, collided(p.key, "hold or order", rerr)
	}
	return StockHold{}, err
}

// replayHold returns the hold placed under p.key when its fingerprint is p's, as it stands
// now (Replayed set); ErrIdempotencyConflict when the key placed another hold or an order
// holds it; ok false when the key is unused.
func (s *Service) replayHold(ctx context.Context, p holdPlacement) (StockHold, bool, error) {
	id, fp, ok, err := s.store.holdByKey(ctx, p.key)
	if err != nil {
		return StockHold{}, false, s.dbErr(err)
	}
	if ok {
		if fp != p.fp {
			return StockHold{}, false, fmt.Errorf("%w: key was used for another request (%s)", ErrIdempotencyConflict, describeHoldFingerprint(fp))
		}
		h, err := s.readHold(ctx, s.store.sqlDB, id)
		if err != nil {
			return StockHold{}, false, s.dbErr(err)
		}
		h.Replayed = true
		return h, true, nil
	}
	o, ok, err := s.store.orderByKey(ctx, p.key)
	if err != nil {
		return StockHold{}, false, s.dbErr(err)
	}
	if ok {
		return StockHold{}, false, fmt.Errorf("%w: key was used for another request (an order: %s)", ErrIdempotencyConflict, describeFingerprint(o.Fingerprint))
	}
	return StockHold{}, false, nil
}

// holdKeyConflict is ErrIdempotencyConflict when a hold was placed under key (one key names
// one order or one hold), nil when none was. Purchases and checkouts ask it when no order
// holds their key.
func (s *Service) holdKeyConflict(ctx context.Context, key string) error {
	_, fp, ok, err := s.store.holdByKey(ctx, key)
	if err != nil {
		return s.dbErr(err)
	}
	if ok {
		return fmt.Errorf("%w: key was used for another request (%s)", ErrIdempotencyConflict, describeHoldFingerprint(fp))
	}
	return nil
}

// sqlHoldByKey finds the hold placed under a key. It is prepared once (store.hk): every
// keyed purchase or checkout that finds no order under its key runs it too.
const sqlHoldByKey = `SELECT id, fingerprint FROM holds WHERE idempotency_key = ?`

// holdByKey returns the id and fingerprint of the hold placed under key, if any.
func (st store) holdByKey(ctx context.Context, key string) (id int64, fp string, ok bool, err error) {
	err = st.hk.QueryRowContext(ctx, key).Scan(&id, &fp)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	return id, fp, err == nil, err
}

// insertHold inserts the hold of p, active until ttl from the database's clock, in tx, and
// returns its id and expiry (Unix ms). A key that an order holds, or that another hold took
// (the unique index: ON CONFLICT DO NOTHING inserts nothing), is errDuplicateKey: the caller's
// transaction rolls back.
func (st store) insertHold(ctx context.Context, tx *sql.Tx, p holdPlacement, now time.Time) (id, expires int64, err error) {
	var key any
	if p.key != "" {
		key = p.key
		var one int
		err := tx.QueryRowContext(ctx, st.sql(`SELECT 1 FROM orders WHERE idempotency_key = ?`), p.key).Scan(&one)
		switch {
		case err == nil:
			return 0, 0, errDuplicateKey
		case !errors.Is(err, sql.ErrNoRows):
			return 0, 0, err
		}
	}
	err = tx.QueryRowContext(ctx, st.sql(`INSERT INTO holds (status, expires_at_ms, strategy, idempotency_key, fingerprint, created_at)
		VALUES ('active', {now} + ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, expires_at_ms`),
		p.ttl.Milliseconds(), p.strategy, key, p.fp, now).Scan(&id, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, errDuplicateKey
	}
	return id, expires, err
}
