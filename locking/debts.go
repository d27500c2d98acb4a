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

// debts are the clean-ups of the core lock that did not reach Redis: the forget of an
// attempt whose reply was lost, the last release of a hold. On a node that hangs a clean-up
// often cannot even be sent (a new connection waits for its handshake), yet the acquire or
// hold it undoes runs when the node answers again: the key is then held by an owner nobody
// has, until its lease ends. The Client pays a key's debts (forget.lua, idempotent, which
// leaves the owner's tombstone) before its next attempt on that key.
type debts struct {
	mu   sync.Mutex
	keys map[string]*debt // by lock hash
	n    int
}

type debt struct {
	k      keys
	owners []string
}

// owe records that owner may hold k in Redis with nobody to release it. A reply from Redis
// (err a redis.Error) means the clean-up ran: nothing is owed.
func (d *debts) owe(k keys, owner string, err error) {
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
			d.n -= len(e.owners)
			delete(d.keys, h)
			break
		}
	}
	e := d.keys[k.hash]
	if e == nil {
		e = &debt{k: k}
		d.keys[k.hash] = e
	}
	e.owners = append(e.owners, owner)
	d.n++
}

// take removes and returns the owners owed on k.
func (d *debts) take(k keys) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.keys[k.hash]
	if e == nil {
		return nil
	}
	delete(d.keys, k.hash)
	d.n -= len(e.owners)
	return e.owners
}

// maxSettleAll bounds the debts settleAll pays at once.
const maxSettleAll = 256

// settleAll pays the debts of every key (at most maxSettleAll), when a breaker closes: the
// node answers again, and a key held by an attempt given up during the hang is freed even if
// this Client never tries that key again. A debt that fails again stays.
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

// settle pays k's debts before an attempt on k: forget.lua for each owner, under ctx (an
// open breaker refuses it at once: the debt is kept for the next attempt).
func (c *Client) settle(ctx context.Context, k keys) {
	owners := c.debts.take(k)
	for _, owner := range owners {
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
		err := forgetScript.Run(cctx, c.rdb, []string{k.hash, k.gone(owner)}, owner, k.channel, "1",
			c.lease.Milliseconds()).Err()
		cancel()
		if err != nil {
			c.debts.owe(k, owner, err)
		}
	}
}
