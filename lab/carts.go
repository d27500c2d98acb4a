//go:build !nodemo

package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

// The demo carts' checkout (POST /api/lab/checkout) sells a cart with a demo cart strategy
// (inventory.DemoCartStrategies: request-order, line-by-line); the real cart strategies sell
// through POST /api/checkout. Its body is /api/checkout's, {"lines":[{"item_id":N,
// "quantity":N},...]} in the request's order; X-Strategy names the strategy and
// X-Simulated-Work the work. "X-Fault: barrier" with "X-Barrier: NAME" makes a request-order
// cart meet the other cart of barrier NAME twice: once it holds its first lock (neither asks
// for its next lock before both hold their first), and once its lock waits are over (neither
// releases a lock before both waits ended). Two carts {A,B} and {B,A} then hold one lock
// each and wait for each other's until their lock waits end, on every run.
const faultBarrier = "barrier"

// The header handlers.HeaderBarrier (X-Barrier) names the barrier of "X-Fault: barrier": 1 to
// 64 letters, digits, '.', '_' or '-'. The carts that send one name meet.

// barrierParties is how many carts meet at a barrier.
const barrierParties = 2

// barrierKeyPrefix is the prefix of the barriers' Redis keys (counters that expire).
const barrierKeyPrefix = "stockguard:lab:barrier:"

var barrierName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Carts is what the demo carts' checkout needs of the inventory service (*inventory.Service).
type Carts interface {
	DemoCheckout(ctx context.Context, req inventory.DemoCheckoutRequest) (inventory.CartReceipt, error)
}

// checkout answers POST /api/lab/checkout: 201 with the order, or the error shape (a cart
// short of stock names its short lines, as /api/checkout does).
func (s *Storefront) checkout(carts Carts) gin.HandlerFunc {
	return func(c *gin.Context) {
		req, err := s.parseCheckout(c.Request)
		if err != nil {
			handlers.WriteError(c, err)
			return
		}
		rec, err := carts.DemoCheckout(c.Request.Context(), req)
		var short *inventory.ShortLinesError
		switch {
		case errors.As(err, &short):
			c.AbortWithStatusJSON(http.StatusConflict, gin.H{"error": gin.H{"code": "insufficient_stock",
				"message": err.Error(), "lines": short.Lines}})
		case err != nil:
			handlers.WriteError(c, err)
		default:
			c.JSON(http.StatusCreated, rec)
		}
	}
}

func (s *Storefront) parseCheckout(r *http.Request) (inventory.DemoCheckoutRequest, error) {
	var body struct {
		Lines []inventory.CartLine `json:"lines"`
	}
	if err := handlers.DecodeJSON(r.Body, &body); err != nil {
		return inventory.DemoCheckoutRequest{}, err
	}
	req := inventory.DemoCheckoutRequest{Lines: body.Lines, Strategy: r.Header.Get(handlers.HeaderStrategy)}
	if raw := r.Header.Get(handlers.HeaderSimulatedWork); raw != "" {
		var err error
		if req.Work, err = time.ParseDuration(raw); err != nil {
			return req, fmt.Errorf("%w: %s %q must be a Go duration from 0s to %s", inventory.ErrInvalid, handlers.HeaderSimulatedWork, raw, inventory.MaxWork)
		}
	}
	values, ok := r.Header[http.CanonicalHeaderKey(handlers.HeaderFault)]
	if !ok {
		return req, nil
	}
	if len(values) != 1 || values[0] != faultBarrier {
		return req, fmt.Errorf("%w: a demo cart takes %s %q only", inventory.ErrInvalid, handlers.HeaderFault, faultBarrier)
	}
	name := r.Header.Get(handlers.HeaderBarrier)
	if !barrierName.MatchString(name) {
		return req, fmt.Errorf("%w: %s must name the barrier: 1 to 64 letters, digits, '.', '_' or '-'", inventory.ErrInvalid, handlers.HeaderBarrier)
	}
	wait := s.cfg.LockWait
	if wait <= 0 {
		wait = defaultBarrierWait
	}
	req.Intercept = &barrier{rdb: s.cfg.Redis, key: barrierKeyPrefix + name, parties: barrierParties, wait: wait}
	return req, nil
}

// defaultBarrierWait bounds a meeting when the storefront's lock wait is not known.
const defaultBarrierWait = 5 * time.Second

// barrier makes the carts of one name meet (inventory.CartInterceptor): a counter per meeting
// in Redis, shared by every storefront process, each cart polling it until every party has
// come. A meeting waits at most wait (the lock wait): a party that never comes (a cart that
// failed before its first lock) holds no other one for longer.
type barrier struct {
	rdb     redis.UniversalClient
	key     string
	parties int
	wait    time.Duration
}

var _ inventory.CartInterceptor = (*barrier)(nil)

// barrierPoll is the interval between two reads of a meeting's counter.
const barrierPoll = 5 * time.Millisecond

// FirstLock meets the other carts once each holds its first lock.
func (b *barrier) FirstLock(ctx context.Context) error {
	if err := b.meet(ctx, "first-lock"); err != nil {
		return fmt.Errorf("%w: lab barrier: %w", inventory.ErrUnavailable, err)
	}
	return nil
}

// LocksEnded meets the other carts once each one's lock waits are over; a failure to reach
// Redis ends the meeting (the cart goes on alone).
func (b *barrier) LocksEnded(ctx context.Context) { _ = b.meet(ctx, "locks-ended") }

// meet counts this cart in at the meeting and waits, at most b.wait, until every party has.
func (b *barrier) meet(ctx context.Context, meeting string) error {
	key := b.key + ":" + meeting
	pipe := b.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	pipe.Expire(ctx, key, 10*time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	n := incr.Val()
	deadline := time.Now().Add(b.wait)
	for n < int64(b.parties) && time.Now().Before(deadline) {
		t := time.NewTimer(barrierPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		var err error
		if n, err = b.rdb.Get(ctx, key).Int64(); err != nil {
			return err
		}
	}
	return nil
}
