package inventory

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

// MaxCartLines is the most lines a cart (or a hold) may have, before lines of one item are
// merged.
const MaxCartLines = 50

// CartLine is one line of a cart: Quantity units of item ItemID.
type CartLine struct {
	ItemID   int64 `json:"item_id"`
	Quantity int   `json:"quantity"`
}

// CheckoutRequest asks to buy every line of a cart, all or nothing. Lines of one item are
// merged (their quantities added) before anything is checked.
type CheckoutRequest struct {
	Lines          []CartLine    // 1..MaxCartLines lines, each of 1..MaxQuantity units (merged: at most MaxQuantity per item)
	Strategy       string        // "" means the service's cart strategy (CartStrategies)
	IdempotencyKey string        // "" means none
	Work           time.Duration // simulated slow work (a payment call), 0..MaxWork
}

// LineReceipt is one line of a cart order (or of a hold): the item, its quantity, the item's
// stock right after the write (0 in a hold's lines) and the lock token that wrote it (0
// without a lock).
type LineReceipt struct {
	ItemID     int64 `json:"item_id"`
	Quantity   int   `json:"quantity"`
	Remaining  int   `json:"remaining"`
	FenceToken int64 `json:"fence_token"`
}

// CartReceipt is the result of a checkout (or of a hold's confirmation), or of an idempotent
// replay of one. Lines are ascending by item id, one per item.
type CartReceipt struct {
	OrderID  int64         `json:"order_id"`
	Lines    []LineReceipt `json:"lines"`
	Strategy string        `json:"strategy"`
	HoldID   int64         `json:"hold_id,omitempty"` // the hold this order confirmed
	Degraded bool          `json:"degraded,omitempty"`
	Replayed bool          `json:"-"` // an earlier answer, returned again
	// Spent is what the checkout cost before it was answered (its work and its wait for the
	// locks), as a purchase's Receipt.Spent; SpentOf(err) tells it of a failed one.
	Spent Spent `json:"-"`
}

// ShortLine is a line of a cart that the stock could not serve.
type ShortLine struct {
	ItemID    int64 `json:"item_id"`
	Requested int   `json:"requested"`
	Available int   `json:"available"`
}

// ShortLinesError is the error of a cart (or hold) refused for want of stock: it names every
// short line. It wraps ErrInsufficientStock.
type ShortLinesError struct {
	Lines []ShortLine
}

// Error names the short lines.
func (e *ShortLinesError) Error() string {
	parts := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		parts[i] = fmt.Sprintf("item %d: %d asked, %d available", l.ItemID, l.Requested, l.Available)
	}
	return ErrInsufficientStock.Error() + ": " + strings.Join(parts, "; ")
}

// Unwrap returns ErrInsufficientStock.
func (e *ShortLinesError) Unwrap() error { return ErrInsufficientStock }

// CartStrategies are the strategies that sell carts and place holds, in table order: naive
// (carts only, for teaching: read every stock, check, write the computed stocks), guard (the
// guarded updates in item order, no lock) and lock+guard (every item's lock at once through
// a MultiLocker, then the fenced, guarded updates).
func CartStrategies() []string { return []string{StrategyNaive, StrategyGuard, StrategyLockGuard} }

// KeyFloor is one lock of a MultiLocker hold with its fencing-token floor.
type KeyFloor struct {
	Key   string
	Floor int64
}

// MultiLocker takes several item locks at once, all or none (NewLocker's Locker is one: it
// adapts locking.Client.ObtainMany). The locks are the single-item locks of the same names: a
// cart and a single purchase of one item exclude each other.
type MultiLocker interface {
	// ObtainMany takes every key's lock, each token above its floor, or none; errors wrap
	// ErrLockTimeout (the wait ended), ErrLockNotReplicated (the wait ended with the locks
	// taken given back: too few replicas acknowledged them) or ErrUnavailable (the lock
	// service is unreachable).
	ObtainMany(ctx context.Context, keys []KeyFloor) (MultiHeld, error)
}

// MultiHeld is one hold of several locks.
type MultiHeld interface {
	// Token is key's fencing token.
	Token(key string) int64
	// Context returns a context derived from parent, cancelled when any key is lost or the
	// hold released.
	Context(parent context.Context) context.Context
	// Release gives every key back (it must reach the lock service under a cancelled ctx).
	Release(ctx context.Context) error
}

// redisMultiLocker is NewLocker's Locker: a locking.Client's Obtain and ObtainMany.
type redisMultiLocker struct {
	redisLocker
	many func(ctx context.Context, keys []locking.KeyFloor, opts ...locking.ObtainOption) (*locking.Multi, error)
}

func (r redisMultiLocker) ObtainMany(ctx context.Context, keys []KeyFloor) (MultiHeld, error) {
	kfs := make([]locking.KeyFloor, len(keys))
	for i, k := range keys {
		kfs[i] = locking.KeyFloor{Key: k.Key, Floor: k.Floor}
	}
	var opts []locking.ObtainOption
	if r.takeover {
		opts = append(opts, locking.WithTakeover())
	}
	m, err := r.many(ctx, kfs, opts...)
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, locking.ErrNotReplicated): // before ErrNotObtained, which it is joined with
		return nil, fmt.Errorf("%w: %d item locks: %w", ErrLockNotReplicated, len(keys), err)
	case errors.Is(err, locking.ErrNotObtained):
		return nil, fmt.Errorf("%w: %d item locks: %w", ErrLockTimeout, len(keys), err)
	default:
		return nil, fmt.Errorf("%w: lock service: %w", ErrUnavailable, err)
	}
}

// cart is one validated cart: merged lines ascending by item, and its fingerprint.
type cart struct {
	lines []cartLine
	fp    string
}

// mergeLines validates lines and merges the lines of one item; the result is ascending by
// item id.
func mergeLines(lines []CartLine) (cart, error) {
	switch {
	case len(lines) == 0:
		return cart{}, fmt.Errorf("%w: a cart needs at least one line", ErrInvalid)
	case len(lines) > MaxCartLines:
		return cart{}, fmt.Errorf("%w: a cart has at most %d lines, got %d", ErrInvalid, MaxCartLines, len(lines))
	}
	sum := make(map[int64]int, len(lines))
	for i, l := range lines {
		switch {
		case l.ItemID <= 0:
			return cart{}, fmt.Errorf("%w: line %d: item id must be positive", ErrInvalid, i+1)
		case l.Quantity < 1 || l.Quantity > MaxQuantity:
			return cart{}, fmt.Errorf("%w: line %d (item %d): quantity must be an integer from 1 to %d, got %d",
				ErrInvalid, i+1, l.ItemID, MaxQuantity, l.Quantity)
		}
		sum[l.ItemID] += l.Quantity
	}
	c := cart{lines: make([]cartLine, 0, len(sum))}
	for id, q := range sum {
		if q > MaxQuantity {
			return cart{}, fmt.Errorf("%w: item %d: the lines of one item add up to %d units, more than %d",
				ErrInvalid, id, q, MaxQuantity)
		}
		c.lines = append(c.lines, cartLine{itemID: id, quantity: q})
	}
	slices.SortFunc(c.lines, func(a, b cartLine) int { return cmp.Compare(a.itemID, b.itemID) })
	var b strings.Builder
	b.WriteString("cart:")
	for i, l := range c.lines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(l.itemID, 10) + "x" + strconv.Itoa(l.quantity))
	}
	c.fp = b.String()
	return c, nil
}

func (c cart) ids() []int64 {
	ids := make([]int64, len(c.lines))
	for i, l := range c.lines {
		ids[i] = l.itemID
	}
	return ids
}

// cartStrategy returns the strategy a cart request names, or the service's default when it
// is a cart strategy (lock+guard otherwise).
func (s *Service) cartStrategy(name string, holds bool) (string, error) {
	if name == "" {
		name = s.def
		if !slices.Contains(CartStrategies(), name) {
			name = StrategyLockGuard
		}
	}
	offered := CartStrategies()
	if holds {
		offered = offered[1:] // naive places no holds
	}
	if !slices.Contains(offered, name) {
		return "", fmt.Errorf("%w: strategy %q does not sell carts (offered: %v)", ErrInvalid, name, offered)
	}
	return name, nil
}

// Checkout sells every line of req.Lines, all or nothing, with req.Strategy (one of
// CartStrategies; "" the default): one transaction writes every line's guarded update (fenced,
// for lock+guard, by that item's lock token) and one order with one line per item. A short
// line rolls everything back: the error is a *ShortLinesError naming every short line (it
// wraps ErrInsufficientStock).
//
// With an IdempotencyKey, the same key and the same cart (after merging) replays the first
// order (Replayed set); another cart under the key is ErrIdempotencyConflict. With an
// admission limit (Config.Admission), a cart takes a permit of each of its items (admitCart).
// Errors wrap the sentinels of Purchase: ErrInvalid, ErrOverloaded, ErrNotFound (naming every unknown item),
// ErrInsufficientStock, ErrIdempotencyConflict, ErrLockTimeout, ErrLockLost (after one retry;
// nothing written), ErrLockNotReplicated, ErrUnavailable. A failed checkout writes nothing.
func (s *Service) Checkout(ctx context.Context, req CheckoutRequest) (CartReceipt, error) {
	sp := &spent{}
	rec, err := s.checkout(ctx, req, sp)
	s.deps.trace.annotateCart(ctx, req, rec, err)
	if err != nil {
		return CartReceipt{}, &spentError{err: err, spent: sp.get()}
	}
	rec.Spent = sp.get()
	return rec, nil
}

func (s *Service) checkout(ctx context.Context, req CheckoutRequest, sp *spent) (CartReceipt, error) {
	c, err := mergeLines(req.Lines)
	if err != nil {
		return CartReceipt{}, err
	}
	switch {
	case req.Work < 0 || req.Work > MaxWork:
		return CartReceipt{}, fmt.Errorf("%w: simulated work must be from 0s to %s, got %s", ErrInvalid, MaxWork, req.Work)
	case len(req.IdempotencyKey) > MaxIdempotencyKey || !printableASCII(req.IdempotencyKey):
		return CartReceipt{}, fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", ErrInvalid, MaxIdempotencyKey)
	}
	name, err := s.cartStrategy(req.Strategy, false)
	if err != nil {
		return CartReceipt{}, err
	}
	key := req.IdempotencyKey
	record := func(degraded bool) recordFunc {
		return func(ctx context.Context, tx *sql.Tx, res []LineReceipt, now time.Time, batch int64) (int64, error) {
			return s.store.insertCartOrder(ctx, tx, res, name, key, c.fp, degraded, now, batch)
		}
	}
	if key == "" {
		return s.sellCart(ctx, c, name, req.Work, record, sp)
	}
	unlock, err := s.keys.lock(ctx, key)
	if err != nil {
		return CartReceipt{}, fmt.Errorf("%w: waiting for an earlier request with the same idempotency key: %w", ErrLockTimeout, err)
	}
	defer unlock()
	if rec, ok, err := s.replayCart(ctx, key, c.fp); ok || err != nil {
		return rec, err
	}
	rec, err := s.sellCart(ctx, c, name, req.Work, record, sp)
	if err == nil {
		return rec, nil
	}
	// Another process may have stored an order under this key since the lookup.
	rec, ok, rerr := s.replayCart(context.WithoutCancel(ctx), key, c.fp)
	switch {
	case ok || errors.Is(rerr, ErrIdempotencyConflict):
		return rec, rerr
	case errors.Is(err, errDuplicateKey):
		return CartReceipt{}, collided(key, "order", rerr)
	}
	return CartReceipt{}, err
}

// replayCart returns the order stored under key, when its fingerprint is fp; a key that
// placed a hold is ErrIdempotencyConflict (hold_keys.go).
func (s *Service) replayCart(ctx context.Context, key, fp string) (CartReceipt, bool, error) {
	o, ok, err := s.store.orderByKey(ctx, key)
	if err != nil {
		return CartReceipt{}, false, s.dbErr(err)
	}
	if !ok {
		return CartReceipt{}, false, s.holdKeyConflict(ctx, key)
	}
	if o.Fingerprint != fp {
		return CartReceipt{}, false, fmt.Errorf("%w: key was used for another request (%s)", ErrIdempotencyConflict, describeFingerprint(o.Fingerprint))
	}
	lines, err := s.store.orderLines(ctx, s.store.sqlDB, o.ID)
	if err != nil {
		return CartReceipt{}, false, s.dbErr(err)
	}
	return CartReceipt{OrderID: o.ID, Lines: lines, Strategy: o.Strategy, Degraded: o.Degraded, Replayed: true}, true, nil
}

// describeFingerprint shows what request a fingerprint stands for.
func describeFingerprint(fp string) string {
	if rest, ok := strings.CutPrefix(fp, "cart:"); ok {
		return "a cart of " + rest + " (item x quantity)"
	}
	return strings.ReplaceAll(fp, ";", ", ")
}

// recordFunc stores what a cart write becomes (an order, a hold) and returns its id; batch is
// the write transaction's batch id (orders carry it). A key already taken is errDuplicateKey.
type recordFunc func(ctx context.Context, tx *sql.Tx, res []LineReceipt, now time.Time, batch int64) (int64, error)

// sellCart runs one cart write with strategy name, once the admission limit admitted every
// item of c (admitCart), retrying once after a lost lock or stale fence and once after the
// database said busy, as Purchase does. record(degraded) stores the result. A ctx that
// carries an Interceptor is refused: an Interceptor acts on single purchases only.
func (s *Service) sellCart(ctx context.Context, c cart, name string, work time.Duration, record func(degraded bool) recordFunc, sp *spent) (CartReceipt, error) {
	if interceptorOf(ctx) != nil {
		return CartReceipt{}, fmt.Errorf("%w: an Interceptor acts on single purchases only, not on a cart or hold", ErrInvalid)
	}
	release, err := s.admitCart(ctx, c)
	if err != nil {
		return CartReceipt{}, err
	}
	defer release()
	lostRetried, busyRetried := false, false
	for {
		rec, err := s.cartOnce(ctx, c, name, work, record, sp)
		switch {
		case err == nil:
			s.log.DebugContext(ctx, "cart sold", "lines", len(c.lines), "strategy", rec.Strategy, "order", rec.OrderID)
			return rec, nil
		case errors.Is(err, ErrLockLost) && !lostRetried && ctx.Err() == nil:
			lostRetried = true
			s.log.InfoContext(ctx, "cart retried after lost lock", "strategy", name, "err", err)
		case models.IsBusy(err) && !busyRetried && ctx.Err() == nil:
			busyRetried = true
			s.log.WarnContext(ctx, "cart retried after database busy", "strategy", name)
		case models.IsBusy(err):
			return CartReceipt{}, fmt.Errorf("%w: database busy: %w", ErrUnavailable, err)
		default:
			if !isDomain(err) && !errors.Is(err, errDuplicateKey) && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "cart failed", "strategy", name, "err", err)
			}
			return CartReceipt{}, s.dbErr(err)
		}
	}
}

// MaxOrderLinesQuery is the most orders one OrderLines call may name (ListOrders' largest
// page).
const MaxOrderLinesQuery = 1000

// OrderLines returns the lines of the orders ids names, by order id, each ascending by item:
// one line for an order of one purchase, one per item for a cart's order (whose Order has
// ItemID 0 when it has several lines), each with the stock its write left and the token it was
// written with. An id that names no order is absent from the map. It
// fails with ErrInvalid for more than MaxOrderLinesQuery ids, and with an error wrapping
// ErrUnavailable when the database cannot be reached.
func (s *Service) OrderLines(ctx context.Context, ids []int64) (map[int64][]LineReceipt, error) {
	if len(ids) > MaxOrderLinesQuery {
		return nil, fmt.Errorf("%w: at most %d orders at once, got %d", ErrInvalid, MaxOrderLinesQuery, len(ids))
	}
	lines, err := s.store.orderLinesOf(ctx, ids)
	if err != nil {
		return nil, s.dbErr(err)
	}
	return lines, nil
}

// admitCart takes the admission limit's permit (Config.Admission) of every item of c, in
// ascending item order, as a purchase of each would: a cart counts as one purchase in flight
// of each of its items. When one item is full, the permits taken are given back and the
// error (ErrOverloaded) names that item; with the lock service unavailable the limit follows
// OnRedisDown, as a purchase's does. The returned release gives every permit back.
func (s *Service) admitCart(ctx context.Context, c cart) (func(), error) {
	if s.admission == nil {
		return func() {}, nil
	}
	var releases []func()
	release := func() {
		for _, r := range slices.Backward(releases) {
			r()
		}
	}
	for _, l := range c.lines {
		r, err := s.admission.Acquire(ctx, l.itemID)
		switch {
		case sellsDegraded(s.onDown, err):
			s.log.DebugContext(ctx, "admission limit unavailable: cart admitted", "item", l.itemID, "err", err)
		case err != nil:
			release()
			return nil, err
		default:
			releases = append(releases, r)
		}
	}
	return release, nil
}
