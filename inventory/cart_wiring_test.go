package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
)

// OrderLines gives every order its lines: one for a purchase, one per item for a cart's order
// and for a confirmed hold's; an unknown order is absent.
func TestOrderLines(t *testing.T) { forEachBackend(t, testOrderLines) }

func testOrderLines(t *testing.T, be backend) {
	srv := redistest.Start(t)
	db, _ := openDB(t, be)
	s := cartService(t, db, srv, nil)
	ids := resetItems(t, s, 10, 10, 10)
	a, b, c := ids[0], ids[1], ids[2]
	ctx := t.Context()
	p, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: b, Quantity: 2})
	require.NoError(t, err)
	cart, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(c, 1, a, 3, c, 2)})
	require.NoError(t, err)
	one, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(a, 1)})
	require.NoError(t, err)
	h, err := s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(b, 1, a, 1)})
	require.NoError(t, err)
	held, err := s.ConfirmHold(ctx, h.ID)
	require.NoError(t, err)

	got, err := s.OrderLines(ctx, []int64{p.OrderID, cart.OrderID, one.OrderID, held.OrderID, 999999})
	require.NoError(t, err)
	items := map[int64][]inventory.CartLine{}
	for id, ls := range got {
		for _, l := range ls {
			items[id] = append(items[id], inventory.CartLine{ItemID: l.ItemID, Quantity: l.Quantity})
		}
	}
	assert.Equal(t, map[int64][]inventory.CartLine{
		p.OrderID:    lines(b, 2),
		cart.OrderID: lines(a, 3, c, 3),
		one.OrderID:  lines(a, 1),
		held.OrderID: lines(a, 1, b, 1),
	}, items)
	assert.Equal(t, cart.Lines, got[cart.OrderID], "each line with the stock its write left and its token, as the checkout answered")
	assert.Equal(t, []inventory.LineReceipt{{ItemID: b, Quantity: 2, Remaining: p.Remaining, FenceToken: p.FenceToken}}, got[p.OrderID])

	orders, err := s.ListOrders(ctx, inventory.OrderQuery{})
	require.NoError(t, err)
	require.Len(t, orders, 4)
	assert.Equal(t, int64(0), orders[1].ItemID, "a cart of several items has no one item")
	assert.Equal(t, 6, orders[1].Quantity, "its quantity is the sum of its lines")
	assert.Equal(t, a, orders[2].ItemID, "a cart of one line shows its item")

	empty, err := s.OrderLines(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, empty)
	_, err = s.OrderLines(ctx, make([]int64, inventory.MaxOrderLinesQuery+1))
	assert.ErrorIs(t, err, inventory.ErrInvalid)
	many := make([]int64, inventory.MaxOrderLinesQuery)
	for i := range many {
		many[i] = int64(i + 1)
	}
	all, err := s.OrderLines(ctx, many)
	require.NoError(t, err, "the largest page is one statement on both backends")
	assert.Len(t, all, 4)
}

// A hold tells the database's clock (Now) with its expiry: placed, the two are its ttl apart;
// read, the time left is at most the ttl and positive while it is active.
func TestHoldNow(t *testing.T) { forEachBackend(t, testHoldNow) }

func testHoldNow(t *testing.T, be backend) {
	db, _ := openDB(t, be)
	s := cartService(t, db, redistest.Start(t), nil)
	ids := resetItems(t, s, 5)
	h, err := s.PlaceHold(t.Context(), inventory.HoldRequest{Lines: lines(ids[0], 1), TTL: 90 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, h.ExpiresAt.Sub(h.Now))
	assert.WithinDuration(t, time.Now(), h.Now, time.Minute, "the database's clock, not zero")
	got, err := s.GetHold(t.Context(), h.ID)
	require.NoError(t, err)
	left := got.ExpiresAt.Sub(got.Now)
	assert.Positive(t, left)
	assert.LessOrEqual(t, left, 90*time.Second)
	assert.False(t, got.Now.Before(h.Now), "read after it was placed")
}

// A cart counts as one purchase in flight of each of its items under the admission limit:
// while it works, its items have no permit left; a cart one of whose items is full is refused
// (ErrOverloaded) and gives back the permits it took; a hold's placement is admitted the same
// way.
func TestCartAdmission(t *testing.T) {
	srv := redistest.Start(t)
	db, _ := openDB(t, sqliteBackend)
	working, proceed := make(chan struct{}), make(chan struct{})
	lc := lockClient(t, srv)
	adm := newAdmission(t, srv, 1, 20*time.Millisecond)
	s := newService(t, inventory.Config{DB: db, Locker: inventory.NewLocker(lc), Admission: adm,
		Sleep: func(ctx context.Context, d time.Duration) error {
			if d == 0 {
				return nil
			}
			working <- struct{}{}
			select {
			case <-proceed:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	t.Cleanup(func() { _ = s.Close() })
	ids := resetItems(t, s, 10, 10, 10)
	a, b, c := ids[0], ids[1], ids[2]
	ctx := t.Context()

	done := make(chan error, 1)
	go func() {
		_, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(a, 1, b, 1), Work: time.Second})
		done <- err
	}()
	<-working
	for _, id := range []int64{a, b} {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 1})
		assert.ErrorIs(t, err, inventory.ErrOverloaded, "item %d's one permit is the cart's", id)
	}
	_, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(c, 1, b, 1)})
	assert.ErrorIs(t, err, inventory.ErrOverloaded)
	_, err = s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(b, 1)})
	assert.ErrorIs(t, err, inventory.ErrOverloaded, "a hold's placement is admitted as a checkout is")
	close(proceed)
	require.NoError(t, <-done)

	release, err := adm.Acquire(ctx, c)
	require.NoError(t, err, "the refused cart gave item c's permit back")
	release()
	_, err = s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(a, 1, b, 1, c, 1)})
	require.NoError(t, err, "the finished cart gave its permits back")
	assert.Equal(t, 8, statsOf(t, s, a).Stock)
	assert.Equal(t, 9, statsOf(t, s, c).Stock, "only the hold took c")
}

// noopInterceptor changes nothing; carrying one is enough to be refused by a cart.
type noopInterceptor struct{}

func (noopInterceptor) Locker(_ string, l inventory.Locker) inventory.Locker { return l }
func (noopInterceptor) BeforeWrite(context.Context, int64, string) error     { return nil }

// An Interceptor acts on single purchases only: a cart or hold whose context carries one is
// refused (ErrInvalid) and writes nothing; a purchase under the same context sells.
func TestCartRefusesInterceptor(t *testing.T) {
	db, _ := openDB(t, sqliteBackend)
	s := cartService(t, db, redistest.Start(t), nil)
	ids := resetItems(t, s, 5)
	ctx := inventory.WithInterceptor(t.Context(), noopInterceptor{})
	_, err := s.Checkout(ctx, inventory.CheckoutRequest{Lines: lines(ids[0], 1)})
	assert.ErrorIs(t, err, inventory.ErrInvalid)
	assert.ErrorContains(t, err, "single purchases only")
	_, err = s.PlaceHold(ctx, inventory.HoldRequest{Lines: lines(ids[0], 1)})
	assert.ErrorIs(t, err, inventory.ErrInvalid)
	assert.Equal(t, 5, statsOf(t, s, ids[0]).Stock, "nothing written")
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: ids[0], Quantity: 1})
	require.NoError(t, err)
	assert.Equal(t, 4, statsOf(t, s, ids[0]).Stock)
}
