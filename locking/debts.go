package locking

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxDebts bounds the clean-ups a Client remembers; past it the oldest key's are dropped
// (their locks then expire with their lease, as without this record).
const maxDebts = 4096

// debts are the clean-ups that did not reach Redis, of every kind: the forget of an attempt
// whose reply was lost and the last release of a hold (core lock, ObtainMany), the queue
// leave of a fair waiter, the return of a semaphore permit, and each Redlock node's forget.
// On a node that hangs a clean-up often cannot even be sent (a new connection waits for its
// handshake), yet the acquire or hold it undoes runs when the node answers again: the key is
// then held by an owner nobody has, until its lease ends. The Client pays a key's debts (each
// an idempotent script that leaves the owner's tombstone) before its next attempt on that key,
// and pays them all when a breaker of its nodes closes (Breakers).
type debts struct {
	mu   sync.Mutex
	keys map[string]*debt // by lock hash
	n    int
}

type debt struct {
	k    keys
	pays []payment
}

// payment is one clean-up owed: pay runs it once more, under a context bounded by
// CallTimeout, and returns the call's error.
type payment struct {
	owner string
	pay   func(context.Context) error
}

// owe records that owner may hold k in Redis with nobody to release it, unless err says the
// clean-up ran (nil, or a reply from Redis: a redis.Error); pay is the clean-up to run again.
func (d *debts) owe(k keys, owner string, err error, pay func(context.Context) error) {
	var re redis.Error
	if err == nil || errors.As(err, &re) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keys == nil {
		d.keys = make(map[string]*debt)
	}
	if d.n >= maxDebts {
		for h, e := range d.keys { // any one key: the lease bounds what is forgotten
			d.n -= len(e.pays)
			delete(d.keys, h)
			break
		}
	}
	e := d.keys[k.hash]
	if e == nil {
		e = &debt{k: k}
		d.keys[k.hash] = e
	}
	e.pays = append(e.pays, payment{owner: owner, pay: pay})
	d.n++
}

// take removes and returns the payments owed on k.
func (d *debts) take(k keys) []payment {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.keys[k.hash]
	if e == nil {
		return nil
	}
	delete(d.keys, k.hash)
	d.n -= len(e.pays)
	return e.pays
}

// owed returns how many clean-ups are owed on k (tests).
func (d *debts) owed(k keys) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.keys[k.hash]; e != nil {
		return len(e.pays)
	}
	return 0
}

// maxSettleAll bounds the debts settleAll pays at once.
const maxSettleAll = 256

// settleAll pays the debts of every key (at most maxSettleAll), when a breaker closes: the
// node answers again, and a key held by an attempt given up during the hang is freed even if
// this Client never tries that key again. A debt that fails again stays (a Redlock's debt to
// a node whose breaker is still open is refused at once, and kept).
func (c *Client) settleAll() {
	c.debts.mu.Lock()
	var ks []keys
	for _, e := range c.debts.keys {
		if len(ks) == maxSettleAll {
			break
		}
		ks = append(ks, e.k)
	}
	c.debts.mu.Unlock()
	for _, k := range ks {
		c.settle(context.Background(), k)
	}
}

// settle pays k's debts before an attempt on k, each under ctx bounded by CallTimeout (an
// open breaker refuses it at once: the debt is kept for the next attempt).
func (c *Client) settle(ctx context.Context, k keys) {
	for _, p := range c.debts.take(k) {
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
		err := p.pay(cctx)
		cancel()
		c.debts.owe(k, p.owner, err, p.pay)
	}
}

// forgetPay is the core lock's clean-up of owner on k, on the Client's Redis: forget.lua's, as
// fair_release.lua runs it for a fair owner that gave up (the owner's tombstone, every hold
// dropped), which also wakes the head of the key's fair queue when the key is free.
func (c *Client) forgetPay(k keys, owner string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.fairScript(ctx, k, owner, true, true, true)
		return err
	}
}
