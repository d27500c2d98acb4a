package locking

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fence_max.lua
	fenceMaxLua    string
	fenceMaxScript = redis.NewScript(fenceMaxLua)
)

// ErrNoNodes is returned by Redlock.Obtain and TryObtain when the Redlock has no nodes.
var ErrNoNodes = errors.New("locking: redlock has no nodes")

// Redlock is the Redlock algorithm over N independent Redis nodes (masters with no
// replication between them): a lock is held when a majority, N/2+1, of the nodes hold it.
//
// An attempt runs the core acquire script on every node in parallel, each call bounded by
// CallTimeout (small against the lease; at most Lease/4). It succeeds when a quorum took the
// key and the validity left, Lease − elapsed − drift (drift = 1% of Lease + 2ms), is still
// positive; otherwise it releases the key on every node it may have taken and, when waiting,
// retries after a random backoff (spin mode; pub/sub across N nodes is not attempted). The
// watchdog renews the key on every node and counts a renewal done when a quorum extended it;
// it declares the lock lost as soon as a quorum is impossible, or when renewals failed until
// Lease − drift − CallTimeout after the last good one was sent.
//
// Fencing: each node keeps its own counter. The token is 1 + the greatest counter over the
// quorum (and the caller's floor); before Obtain returns, every node of the quorum has its
// counter raised to the token (a max-set), so any later quorum, which overlaps this one in at
// least one node, issues a greater token. An acquired node whose counter could not be raised
// does not count towards the quorum.
//
// What Redlock does not guarantee (Kleppmann, "How to do distributed locking", 2016):
// safety rests on timing. A holder paused longer than the validity (GC, swapping, a stopped
// VM), a node whose clock jumps and expires the key early, or a node that restarts without
// persistence and forgets the key, can each let a second client take the lock while the
// first still believes it holds it: the watchdog only tells the first one after the fact. So
// the lock is an efficiency device that keeps contenders from colliding most of the time;
// correctness comes from the fencing token checked by the resource itself (in stockguard, the
// conditional UPDATE with fence_token <= ?), which rejects the stale holder's write. Redlock
// improves availability over one Redis (it survives the loss of a minority of nodes) and,
// with the write-back, keeps tokens monotonic across quorums; it does not make the guard
// optional.
//
// Locks are *Lock values with the full surface. Re-entry under Lock.Context of this Redlock
// is counted in the process (no Redis call). Options apply as for a Client, except that
// waiting always spins (Options.Spin, or its defaults).
type Redlock struct {
	c      *Client // options, hooks, logger; the identity of re-entry contexts; never calls Redis
	nodes  []redis.UniversalClient
	quorum int
	ops    *kindOps
}

// NewRedlock returns a Redlock over nodes, each an independent Redis deployment built with
// ContextTimeoutEnabled (a warning is logged for each node seen without it). A nil opts means
// the defaults. It never fails; with no nodes, Obtain returns ErrNoNodes.
func NewRedlock(nodes []redis.UniversalClient, opts *Options) *Redlock {
	c := New(nil, opts)
	if c.family.spin == nil {
		s := (*SpinOptions)(nil).withDefaults()
		c.family.spin = &s
	}
	for i, n := range nodes {
		if enabled, known := contextTimeoutEnabled(n); known && !enabled {
			c.log.Warn("locking: redlock node has ContextTimeoutEnabled off; call timeouts are not enforced", "node", i)
		}
	}
	r := &Redlock{c: c, nodes: slices.Clone(nodes), quorum: len(nodes)/2 + 1}
	r.ops = &kindOps{release: r.release, forget: r.forget, ttl: r.ttl, renew: r.renew}
	return r
}

// Quorum returns N/2+1, the number of nodes that must hold a lock.
func (r *Redlock) Quorum() int { return r.quorum }

// Obtain returns the lock on key, retrying after a random backoff while it is held, until
// it holds it, ctx ends, or the wait limit (Options.Wait, WithWait) passes; WithFloor sets
// the fencing-token floor. Under a context carrying a Lock of this Redlock on key it
// re-enters that lock. It returns ErrNotObtained when the wait ended (joined with ctx.Err()
// when ctx ended it), ErrClosed after Close, ErrNoNodes without nodes, and a Redis error
// (joining the nodes' errors) when fewer than a quorum of nodes answered: it does not retry
// then.
func (r *Redlock) Obtain(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return r.obtain(ctx, key, true, opts)
}

// TryObtain is Obtain with one attempt. It returns ErrNotObtained when no quorum could be
// taken in time, ErrClosed, ErrNoNodes, or a Redis error as Obtain does.
func (r *Redlock) TryObtain(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return r.obtain(ctx, key, false, opts)
}

// Close makes later Obtain calls return ErrClosed. It does not release held locks nor close
// the node clients. It always returns nil.
func (r *Redlock) Close() error { return r.c.Close() }

func (r *Redlock) obtain(ctx context.Context, key string, wait bool, opts []ObtainOption) (*Lock, error) {
	if len(r.nodes) == 0 {
		return nil, ErrNoNodes
	}
	if h := heldIn(ctx, r.c, key); h != nil && ctx.Err() == nil && !r.c.notify.isClosed() {
		return h.reenterLocal()
	}
	cfg := r.c.obtainConfigFor(wait, opts)
	k := r.c.keysFor(key)
	owner := newOwner()
	start := time.Now()
	return r.c.obtainKind(ctx, "", cfg.wait, func(ctx context.Context) (*Lock, time.Duration, error) {
		return r.attempt(ctx, k, owner, cfg.floor, start)
	})
}

// nodeReply is one node's answer to a script call.
type nodeReply struct {
	res []int64
	n   int64
	err error
}

// each calls f on every node in parallel, each call bounded by CallTimeout and ctx, and
// returns the replies in node order.
func (r *Redlock) each(ctx context.Context, nodes []int, f func(ctx context.Context, rdb redis.UniversalClient) nodeReply) []nodeReply {
	cctx, cancel := context.WithTimeout(ctx, r.c.callTimeout)
	defer cancel()
	out := make([]nodeReply, len(r.nodes))
	var wg sync.WaitGroup
	for _, i := range nodes {
		wg.Go(func() { out[i] = f(cctx, r.nodes[i]) })
	}
	wg.Wait()
	return out
}

func (r *Redlock) all() []int {
	idx := make([]int, len(r.nodes))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// attempt makes one Redlock round: acquire everywhere, raise the fencing counters of the
// quorum to the token, check the validity. On failure it releases every node it may hold.
func (r *Redlock) attempt(ctx context.Context, k keys, owner string, floor int64, start time.Time) (*Lock, time.Duration, error) {
	sent := time.Now()
	replies := r.each(ctx, r.all(), func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		res, err := acquireScript.Run(ctx, rdb, []string{k.hash, k.fence},
			owner, r.c.lease.Milliseconds(), strconv.FormatInt(floor, 10), "0").Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("unexpected reply %v", res)
		}
		return nodeReply{res: res, err: err}
	})
	var (
		held, touched []int
		token         int64
		hint          time.Duration
		answered      int
		errs          []error
	)
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
			touched = append(touched, i) // the reply may be lost, not the acquire
		case rep.res[0] == 1:
			answered++
			held, touched = append(held, i), append(touched, i)
			token = max(token, rep.res[1])
		default:
			answered++
			if ttl := time.Duration(rep.res[1]) * time.Millisecond; ttl > 0 && (hint == 0 || ttl < hint) {
				hint = ttl
			}
		}
	}
	if len(held) >= r.quorum {
		held = r.raiseFences(ctx, k, token, held, replies)
		if len(held) >= r.quorum && r.c.lease-time.Since(sent)-drift(r.c.lease) > 0 {
			return r.c.newHold(k, owner, token, r.ops, sent, start), 0, nil
		}
	}
	if len(touched) > 0 {
		cctx, cancel := r.c.bestEffort(ctx)
		r.releaseOn(cctx, k, owner, touched)
		cancel()
	}
	if ctx.Err() != nil {
		return nil, 0, errors.Join(ErrNotObtained, ctx.Err())
	}
	if answered < r.quorum {
		return nil, 0, fmt.Errorf("locking: redlock obtain %q: %d of %d nodes answered: %w",
			k.name, answered, len(r.nodes), errors.Join(errs...))
	}
	return nil, hint, nil
}

// raiseFences writes token to the fencing counter of every held node that issued less, and
// returns the nodes that hold the lock with a counter of at least token.
func (r *Redlock) raiseFences(ctx context.Context, k keys, token int64, held []int, replies []nodeReply) []int {
	var behind []int
	for _, i := range held {
		if replies[i].res[1] < token {
			behind = append(behind, i)
		}
	}
	if len(behind) == 0 {
		return held
	}
	raised := r.each(ctx, behind, func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := fenceMaxScript.Run(ctx, rdb, []string{k.fence}, token).Int64()
		return nodeReply{n: n, err: err}
	})
	return slices.DeleteFunc(held, func(i int) bool {
		return slices.Contains(behind, i) && (raised[i].err != nil || raised[i].n < token)
	})
}

// releaseOn releases owner's key on the given nodes (every hold) and returns how many nodes
// released it, how many found it not theirs, and the errors.
func (r *Redlock) releaseOn(ctx context.Context, k keys, owner string, nodes []int) (released, notOurs int, errs []error) {
	replies := r.each(ctx, nodes, func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := releaseScript.Run(ctx, rdb, []string{k.hash}, owner, k.channel, "1").Int64()
		return nodeReply{n: n, err: err}
	})
	for _, i := range nodes {
		switch rep := replies[i]; {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.n < 0:
			notOurs++
		default:
			released++
		}
	}
	return released, notOurs, errs
}

// release gives the key up on every node on the last release; an inner release (re-entry is
// counted in the process) only reports a hold left.
func (r *Redlock) release(ctx context.Context, h *hold, last bool) (int64, error) {
	if !last {
		return 1, nil
	}
	released, _, errs := r.releaseOn(ctx, h.k, h.owner, r.all())
	switch {
	case released >= r.quorum:
		return 0, nil
	case len(errs) > 0:
		return 0, fmt.Errorf("released on %d of %d nodes: %w", released, len(r.nodes), errors.Join(errs...))
	}
	return -1, nil
}

func (r *Redlock) forget(ctx context.Context, h *hold) {
	cctx, cancel := r.c.bestEffort(ctx)
	defer cancel()
	r.releaseOn(cctx, h.k, h.owner, r.all())
}

// renew extends the key on every node: held while a quorum extended it, lost at once when a
// quorum can no longer be reached.
func (r *Redlock) renew(ctx context.Context, h *hold) (bool, error) {
	replies := r.each(ctx, r.all(), func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := renewScript.Run(ctx, rdb, []string{h.k.hash}, h.owner, r.c.lease.Milliseconds()).Int64()
		return nodeReply{n: n, err: err}
	})
	var ok, gone int
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.n == 1:
			ok++
		default:
			gone++
		}
	}
	switch {
	case ok >= r.quorum:
		return true, nil
	case gone > len(r.nodes)-r.quorum:
		return false, nil
	}
	return false, fmt.Errorf("renewed on %d of %d nodes: %w", ok, len(r.nodes), errors.Join(errs...))
}

// ttl is the validity left: the quorum-th longest remaining lease over the nodes, less drift.
func (r *Redlock) ttl(ctx context.Context, h *hold) (time.Duration, error) {
	replies := r.each(ctx, r.all(), func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := ttlScript.Run(ctx, rdb, []string{h.k.hash}, h.owner).Int64()
		return nodeReply{n: n, err: err}
	})
	var ttls []time.Duration
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.n >= 0:
			ttls = append(ttls, time.Duration(rep.n)*time.Millisecond)
		}
	}
	if len(ttls) < r.quorum {
		if len(errs) > 0 {
			return 0, fmt.Errorf("locking: ttl of %q: %w", h.k.name, errors.Join(errs...))
		}
		return 0, ErrNotHeld
	}
	slices.Sort(ttls)
	slices.Reverse(ttls)
	return max(ttls[r.quorum-1]-drift(r.c.lease), 0), nil
}
