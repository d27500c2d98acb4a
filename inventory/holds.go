package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/models"
)

// Hold limits.
const (
	MinHoldTTL     = time.Second
	MaxHoldTTL     = time.Hour
	DefaultHoldTTL = 10 * time.Minute // Config.HoldTTL's default
)

// Errors of holds; test them with errors.Is.
var (
	// ErrHoldExpired: the hold ran out (by the database's clock) before it was confirmed; its
	// units are back in stock.
	ErrHoldExpired = errors.New("hold expired")
	// ErrHoldNotActive: the hold was cancelled (it cannot be confirmed) or confirmed (it
	// cannot be cancelled).
	ErrHoldNotActive = errors.New("hold is not active")
)

// HoldRequest asks to set aside every line of a cart, all or nothing, for TTL.
type HoldRequest struct {
	Lines          []CartLine    // as CheckoutRequest.Lines
	TTL            time.Duration // MinHoldTTL..MaxHoldTTL; 0 means Config.HoldTTL
	Strategy       string        // guard or lock+guard; "" the service's cart strategy
	IdempotencyKey string        // "" means none; see PlaceHold
}

// StockHold is a hold as the service shows it. Status is one of models.HoldActive,
// HoldConfirmed, HoldCancelled, HoldExpired; a hold past its expiry that no transaction has
// ended yet shows expired. OrderID is the order of a confirmed hold.
//
// Now is the database's clock when the hold was placed or read: the clock that decides its
// expiry. A client counts down ExpiresAt − Now from the moment it got the answer, whatever
// its own clock says.
type StockHold struct {
	ID        int64         `json:"id"`
	Status    string        `json:"status"`
	Lines     []LineReceipt `json:"lines"`
	ExpiresAt time.Time     `json:"expires_at"`
	Now       time.Time     `json:"now"`
	OrderID   int64         `json:"order_id,omitempty"`
	Strategy  string        `json:"strategy"`
	Replayed  bool          `json:"-"` // the hold an earlier placement under the same key placed, as it stands now
	// Spent is what placing it cost (its wait for the locks; a hold has no work), as a
	// purchase's Receipt.Spent; SpentOf(err) tells it of a failed placement.
	Spent Spent `json:"-"`
}

// PlaceHold takes every line's units off the stock, all or nothing, with the same write as
// Checkout (the guarded update in item order, fenced by each item's lock token for
// lock+guard), and records a hold that expires TTL later by the database's clock. Until the
// hold is confirmed, cancelled or expired, its units cannot be sold to anyone else: for every
// item, initial stock − stock = the units of its order lines + the units of its active holds.
// A short line is a *ShortLinesError (ErrInsufficientStock); other errors as Checkout's.
//
// With an IdempotencyKey, a placement whose answer was lost can be sent again: the same key
// with the same merged lines and ttl answers the hold it placed, as it stands now (active,
// confirmed, cancelled or expired: GetHold's view), with Replayed set, and sets nothing more
// aside. The key shares the orders' key space (one key names one order or one hold): a key
// already used by another hold, or by any purchase or checkout, is ErrIdempotencyConflict
// (hold_keys.go).
func (s *Service) PlaceHold(ctx context.Context, req HoldRequest) (StockHold, error) {
	sp := &spent{}
	h, err := s.placeHoldReq(ctx, req, sp)
	if err != nil {
		return StockHold{}, &spentError{err: err, spent: sp.get()}
	}
	h.Spent = sp.get()
	return h, nil
}

// placeHoldReq validates req and places its hold, keyed or not; sp gathers what it spent.
func (s *Service) placeHoldReq(ctx context.Context, req HoldRequest, sp *spent) (StockHold, error) {
	c, err := mergeLines(req.Lines)
	if err != nil {
		return StockHold{}, err
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = s.holdTTL
	}
	if ttl < MinHoldTTL || ttl > MaxHoldTTL {
		return StockHold{}, fmt.Errorf("%w: a hold's ttl must be from %s to %s, got %s", ErrInvalid, MinHoldTTL, MaxHoldTTL, ttl)
	}
	if key := req.IdempotencyKey; len(key) > MaxIdempotencyKey || !printableASCII(key) {
		return StockHold{}, fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", ErrInvalid, MaxIdempotencyKey)
	}
	name, err := s.cartStrategy(req.Strategy, true)
	if err != nil {
		return StockHold{}, err
	}
	p := holdPlacement{cart: c, ttl: ttl, strategy: name, key: req.IdempotencyKey, fp: holdFingerprint(c, ttl), sp: sp}
	if p.key == "" {
		return s.placeHold(ctx, p)
	}
	return s.placeHoldKeyed(ctx, p)
}

// holdPlacement is one validated hold placement.
type holdPlacement struct {
	cart     cart
	ttl      time.Duration
	strategy string
	key      string // "" for none
	fp       string // holdFingerprint
	sp       *spent // what the placement spent (its wait for the locks)
}

// placeHold writes the hold of p: its lines' guarded updates, the hold and its lines, in one
// transaction. A key already taken (by a hold or an order) is errDuplicateKey, the
// transaction rolled back.
func (s *Service) placeHold(ctx context.Context, p holdPlacement) (StockHold, error) {
	var expires int64
	record := func(bool) recordFunc {
		return func(ctx context.Context, tx *sql.Tx, res []LineReceipt, now time.Time, _ int64) (int64, error) {
			var id int64
			var err error
			if id, expires, err = s.store.insertHold(ctx, tx, p, now); err != nil {
				return 0, err
			}
			for _, l := range res {
				if _, err := tx.ExecContext(ctx, s.store.sql(`INSERT INTO hold_lines (hold_id, item_id, quantity, fence_token)
					VALUES (?, ?, ?, ?)`), id, l.ItemID, l.Quantity, l.FenceToken); err != nil {
					return 0, err
				}
			}
			return id, nil
		}
	}
	rec, err := s.sellCart(ctx, p.cart, p.strategy, 0, record, p.sp)
	if err != nil {
		return StockHold{}, err
	}
	for i := range rec.Lines {
		rec.Lines[i].Remaining = 0
	}
	at := time.UnixMilli(expires).UTC()
	return StockHold{ID: rec.OrderID, Status: models.HoldActive, Lines: rec.Lines, ExpiresAt: at,
		Now: at.Add(-p.ttl.Truncate(time.Millisecond)), Strategy: p.strategy}, nil
}

// GetHold returns hold id, or an error wrapping ErrNotFound.
func (s *Service) GetHold(ctx context.Context, id int64) (StockHold, error) {
	h, err := s.readHold(ctx, s.store.sqlDB, id)
	if err != nil {
		return StockHold{}, s.dbErr(err)
	}
	return h, nil
}

// readHold reads hold id: its status as of the database's clock (an active hold past its
// expiry is expired) and its lines.
func (s *Service) readHold(ctx context.Context, c conn, id int64) (StockHold, error) {
	if id <= 0 {
		return StockHold{}, fmt.Errorf("%w: hold id must be positive", ErrInvalid)
	}
	var (
		h            StockHold
		expires, now int64
		order        sql.NullInt64
	)
	err := c.QueryRowContext(ctx, s.store.sql(`SELECT id, CASE WHEN status = 'active' AND expires_at_ms <= {now}
		THEN 'expired' ELSE status END, expires_at_ms, {now}, order_id, strategy FROM holds WHERE id = ?`), id).
		Scan(&h.ID, &h.Status, &expires, &now, &order, &h.Strategy)
	if errors.Is(err, sql.ErrNoRows) {
		return StockHold{}, fmt.Errorf("%w: hold %d", ErrNotFound, id)
	}
	if err != nil {
		return StockHold{}, err
	}
	h.ExpiresAt, h.Now, h.OrderID = time.UnixMilli(expires).UTC(), time.UnixMilli(now).UTC(), order.Int64
	if h.Lines, err = s.store.holdLines(ctx, c, id); err != nil {
		return StockHold{}, err
	}
	return h, nil
}

// ConfirmHold turns active hold id into an order, without touching the stock (its units were
// taken when it was placed): the order's lines are the hold's. Confirming a confirmed hold
// returns its order again (Replayed set). A hold past its expiry by the database's clock is
// ErrHoldExpired (its units go back in the same transaction, if no one gave them back
// before); a cancelled hold is ErrHoldNotActive; an unknown one ErrNotFound.
func (s *Service) ConfirmHold(ctx context.Context, id int64) (CartReceipt, error) {
	if id <= 0 {
		return CartReceipt{}, fmt.Errorf("%w: hold id must be positive", ErrInvalid)
	}
	var (
		rec     CartReceipt
		outcome error // the answer, decided in a transaction that commits
	)
	err := s.retryBusy(ctx, func() error {
		rec, outcome = CartReceipt{}, nil
		return s.store.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, s.store.sql(`UPDATE holds SET status = 'confirmed'
				WHERE id = ? AND status = 'active' AND expires_at_ms > {now}`), id)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				rec, err = s.confirmed(ctx, tx, id)
				return err
			}
			h, err := s.readHold(ctx, tx, id)
			if err != nil {
				return err
			}
			switch h.Status {
			case models.HoldConfirmed:
				lines, err := s.store.orderLines(ctx, tx, h.OrderID)
				rec = CartReceipt{OrderID: h.OrderID, Lines: lines, Strategy: h.Strategy, HoldID: id, Replayed: true}
				return err
			case models.HoldCancelled:
				outcome = fmt.Errorf("%w: hold %d was cancelled", ErrHoldNotActive, id)
				return nil
			}
			// Expired: give its units back now, once (whoever ends it first gives them).
			outcome = fmt.Errorf("%w: hold %d expired at %s", ErrHoldExpired, id, h.ExpiresAt.Format(time.RFC3339Nano))
			give := map[int64]int{}
			if err := s.store.endHold(ctx, tx, id, s.store.sql(sqlExpire), give); err != nil {
				return err
			}
			return s.store.giveBackAll(ctx, tx, give, time.Now().UTC())
		})
	})
	if err != nil {
		return CartReceipt{}, s.dbErr(err)
	}
	return rec, outcome
}

// confirmed writes the order of hold id, just confirmed in tx.
func (s *Service) confirmed(ctx context.Context, tx *sql.Tx, id int64) (CartReceipt, error) {
	lines, err := s.store.holdLines(ctx, tx, id)
	if err != nil {
		return CartReceipt{}, err
	}
	var strategy string
	if err := tx.QueryRowContext(ctx, s.store.sql(`SELECT strategy FROM holds WHERE id = ?`), id).Scan(&strategy); err != nil {
		return CartReceipt{}, err
	}
	for i, l := range lines {
		if err := tx.QueryRowContext(ctx, s.store.sql(`SELECT stock FROM items WHERE id = ?`), l.ItemID).Scan(&lines[i].Remaining); err != nil &&
			!errors.Is(err, sql.ErrNoRows) {
			return CartReceipt{}, err
		}
	}
	now := time.Now().UTC()
	order, err := s.store.insertCartOrder(ctx, tx, lines, strategy, "", fmt.Sprintf("hold:%d", id), false, now, newBatchID())
	if err != nil {
		return CartReceipt{}, err
	}
	if _, err := tx.ExecContext(ctx, s.store.sql(`UPDATE holds SET order_id = ? WHERE id = ?`), order, id); err != nil {
		return CartReceipt{}, err
	}
	return CartReceipt{OrderID: order, Lines: lines, Strategy: strategy, HoldID: id}, nil
}

// CancelHold ends active hold id and gives its units back, in one transaction. Cancelling a
// cancelled or expired hold does nothing (nil); a confirmed hold is ErrHoldNotActive; an
// unknown one ErrNotFound.
func (s *Service) CancelHold(ctx context.Context, id int64) error {
	if id <= 0 {
		return fmt.Errorf("%w: hold id must be positive", ErrInvalid)
	}
	var outcome error
	err := s.retryBusy(ctx, func() error {
		outcome = nil
		return s.store.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			give := map[int64]int{}
			// Past its expiry it ends as expired, as it would have anyway.
			err := s.store.endHold(ctx, tx, id, s.store.sql(`UPDATE holds SET status = CASE WHEN expires_at_ms <= {now}
				THEN 'expired' ELSE 'cancelled' END WHERE id = ? AND status = 'active'`), give)
			if err != nil {
				return err
			}
			if len(give) > 0 {
				return s.store.giveBackAll(ctx, tx, give, time.Now().UTC())
			}
			h, err := s.readHold(ctx, tx, id)
			if err != nil {
				return err
			}
			if h.Status == models.HoldConfirmed {
				outcome = fmt.Errorf("%w: hold %d was confirmed (order %d)", ErrHoldNotActive, id, h.OrderID)
			}
			return nil
		})
	})
	if err != nil {
		return s.dbErr(err)
	}
	return outcome
}

// retryBusy runs fn again, once, when the database said busy.
func (s *Service) retryBusy(ctx context.Context, fn func() error) error {
	err := fn()
	if models.IsBusy(err) && ctx.Err() == nil {
		err = fn()
	}
	if models.IsBusy(err) {
		return fmt.Errorf("%w: database busy: %w", ErrUnavailable, err)
	}
	return err
}
