package locking

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
// CallTimeout, which for a Redlock defaults to Lease/100 (at least 100ms, at most a Client's
// default; 300ms for the default lease): small against the lease. It succeeds when a quorum took the key and the validity
// left, Lease − elapsed − drift (drift = 1% of Lease + 2ms), is still positive; it does not
// wait for the slower nodes then (a black-holed minority costs nothing). Otherwise it
// releases the key on every node it may have taken and, when waiting, retries after a
// random backoff (spin mode; pub/sub across N nodes is not attempted). Release, too, returns
// once a quorum released. The
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
// conditional UPDATE with fence_token < ?), which rejects the stale holder's write. Redlock
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
	kind   *kind
}

// NewRedlock returns a Redlock over nodes, each an independent Redis deployment built with
// ContextTimeoutEnabled (a warning is logged for each node seen without it). A nil opts means
// the defaults. It never fails; with no nodes, Obtain returns ErrNoNodes, and with
// Options.Replicas set, ErrReplicasUnsupported (WAIT counts the replicas of one master; a
// Redlock's nodes are independent masters, whose safety rests on the quorum instead).
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
	if opts == nil || opts.CallTimeout <= 0 { // per node: small against the lease
		c.callTimeout = min(c.callTimeout, max(c.lease/100, 2*minCallTimeout))
	}
	r := &Redlock{c: c, nodes: slices.Clone(nodes), quorum: len(nodes)/2 + 1}
	r.kind = &kind{reentry: reenterLocal, release: r.release, forget: r.forget, ttl: r.ttl, renew: r.renew}
	switch {
	case len(r.nodes) == 0:
		r.kind.refuse = ErrNoNodes
	case c.replicas > 0: // independent masters: no replicas to wait for
		r.kind.refuse = ErrReplicasUnsupported
	}
	c.replicas = 0
	return r
}

// Quorum returns N/2+1, the number of nodes that must hold a lock.
func (r *Redlock) Quorum() int { return r.quorum }

// Obtain returns the lock on key, retrying after a random backoff while it is held, until
// it holds it, ctx ends, or the wait limit (Options.Wait, WithWait) passes; WithFloor sets
// the fencing-token floor. Under a context carrying a Lock of this Redlock on key it
// re-enters that lock. It returns ErrNotObtained when the wait ended (joined with ctx.Err()
// when ctx ended it), ErrClosed after Close, ErrNoNodes without nodes, ErrEmptyKey for the
// key "", and a Redis error
// (joining the nodes' errors) when fewer than a quorum of nodes answered: it does not retry
// then.
func (r *Redlock) Obtain(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return r.obtain(ctx, key, true, opts)
}

// TryObtain is Obtain with one attempt. It returns ErrNotObtained when no quorum could be
// taken in time, ErrClosed, ErrNoNodes, ErrEmptyKey, or a Redis error as Obtain does.
func (r *Redlock) TryObtain(ctx context.Context, key string, opts ...ObtainOption) (*Lock, error) {
	return r.obtain(ctx, key, false, opts)
}

// Close makes later Obtain calls return ErrClosed. It does not release held locks nor close
// the node clients. It always returns nil.
func (r *Redlock) Close() error { return r.c.Close() }

func (r *Redlock) obtain(ctx context.Context, key string, wait bool, opts []ObtainOption) (*Lock, error) {
	if l, done, err := r.c.enter(ctx, key, r.kind); done {
		return l, err
	}
	cfg := r.c.obtainConfigFor(wait, opts)
	k := r.c.keysFor(key)
	start := time.Now()
	return r.c.obtainKind(ctx, r.kind, "", cfg.wait, func(ctx context.Context) (*Lock, time.Duration, error) {
		// An owner per round: a failed round's clean-up leaves the owner's tombstone on the
		// nodes (forget.lua), which refuses every later acquire of that owner.
		r.c.settle(ctx, k) // clean-ups of k that did not reach a node (debts.go)
		return r.attempt(ctx, k, newOwner(), cfg.floor, start)
	})
}

// nodeReply is one node's answer to a script call.
type nodeReply struct {
	res []int64
	n   int64
	err error
}

// each calls f on the given nodes in parallel, each call bounded by CallTimeout and ctx, and
// returns the replies in node order with which nodes answered. It returns once every node
// answered, or as soon as decided (when not nil), called with each reply in turn, reports
// that the replies so far settle the outcome, so that a black-holed node costs nothing then.
// The calls still running then go on, bounded by CallTimeout only (not by ctx, which the
// caller may end as soon as it has the answer); done is closed when all have ended.
func (r *Redlock) each(ctx context.Context, nodes []int, f func(ctx context.Context, rdb redis.UniversalClient) nodeReply,
	decided func(nodeReply) bool) (replies []nodeReply, got []bool, done <-chan struct{}) {
	if decided != nil {
		ctx = context.WithoutCancel(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, r.c.callTimeout)
	type result struct {
		i   int
		rep nodeReply
	}
	ch := make(chan result, len(nodes)) // buffered: a call finishing after the return never blocks
	for _, i := range nodes {
		go func() { ch <- result{i, f(cctx, r.nodes[i])} }()
	}
	out := make([]nodeReply, len(r.nodes))
	got = make([]bool, len(r.nodes))
	finished := make(chan struct{})
	for n := range nodes {
		res := <-ch
		out[res.i], got[res.i] = res.rep, true
		if decided != nil && decided(res.rep) && n < len(nodes)-1 {
			go func() { // the others still run: end their context once they are done
				for range len(nodes) - 1 - n {
					<-ch
				}
				cancel()
				close(finished)
			}()
			return out, got, finished
		}
	}
	cancel()
	close(finished)
	return out, got, finished
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
	taken := 0
	replies, got, late := r.each(ctx, r.all(), func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		res, err := acquireScript.Run(ctx, rdb, []string{k.hash, k.fence, k.gone(owner)},
			owner, r.c.lease.Milliseconds(), strconv.FormatInt(floor, 10), "0").Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("unexpected reply %v", res)
		}
		return nodeReply{res: res, err: err}
	}, func(rep nodeReply) bool {
		// Done once a quorum took the key. A failure waits for every node, so that the
		// clean-up below releases each node the attempt took, late replies included.
		if rep.err == nil && rep.res[0] == 1 {
			taken++
		}
		return taken >= r.quorum
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
		case !got[i] || rep.err != nil:
			if rep.err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
			}
			// A call refused by an open breaker sent nothing; one cut by its opening was sent.
			if !errors.Is(rep.err, ErrBreakerOpen) || maybeExecuted(rep.err) {
				touched = append(touched, i) // the reply may be lost or late, not the acquire
			}
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
			return r.c.newHold(k, owner, token, r.kindAfter(late, got), sent, start), 0, nil
		}
	}
	if len(touched) > 0 {
		// A release must not overtake a late acquire: wait for the calls still running (at
		// most CallTimeout). A call that failed may still reach its node after the clean-up
		// (Redis may serve the clean-up's connection first): the owner's tombstone, left by
		// the clean-up (forget.lua), makes it take nothing.
		<-late
		cctx, cancel := r.c.bestEffort(ctx)
		r.releaseOn(cctx, k, owner, touched, false, true)
		cancel()
	}
	if err := ended(ctx); err != nil {
		return nil, 0, errors.Join(ErrNotObtained, err)
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
	raised, _, _ := r.each(ctx, behind, func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := fenceMaxScript.Run(ctx, rdb, []string{k.fence}, token).Int64()
		return nodeReply{n: n, err: err}
	}, nil)
	return slices.DeleteFunc(held, func(i int) bool {
		return slices.Contains(behind, i) && (raised[i].err != nil || raised[i].n < token)
	})
}

// releaseOn releases owner's key on the given nodes (every hold) and returns how many nodes
// released it, how many found it not theirs, and the errors. With early it returns once a
// quorum released (the other calls go on). abandon, for a clean-up, uses forget.lua, which
// also leaves the owner's tombstone on each node for one lease.
func (r *Redlock) releaseOn(ctx context.Context, k keys, owner string, nodes []int, early, abandon bool) (released, notOurs int, errs []error) {
	var decided func(nodeReply) bool
	if early {
		n := 0
		decided = func(rep nodeReply) bool {
			if rep.err == nil && rep.n >= 0 {
				n++
			}
			return n >= r.quorum
		}
	}
	replies, got, _ := r.each(ctx, nodes, func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		var cmd *redis.Cmd
		if abandon {
			cmd = forgetScript.Run(ctx, rdb, []string{k.hash, k.gone(owner)}, owner, k.channel, "1",
				r.c.lease.Milliseconds())
		} else {
			cmd = releaseScript.Run(ctx, rdb, []string{k.hash}, owner, k.channel, "1")
		}
		n, err := cmd.Int64()
		// A node the clean-up did not reach is owed it (debts.go): paid before the next
		// attempt on the key, or when that node's breaker closes. Late calls, still running
		// after an early return, record theirs too.
		r.c.debts.owe(k, owner, err, forgetPayOn(rdb, k, owner, r.c.lease))
		return nodeReply{n: n, err: err}
	}, decided)
	for _, i := range nodes {
		switch rep := replies[i]; {
		case !got[i]:
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
	released, _, errs := r.releaseOn(ctx, h.k, h.owner, r.all(), true, false)
	switch {
	case released >= r.quorum:
		return 0, nil
	case len(errs) > 0:
		return 0, fmt.Errorf("released on %d of %d nodes: %w", released, len(r.nodes), errors.Join(errs...))
	}
	return -1, nil
}

// kindAfter returns the kind of a lock whose acquire calls on the nodes slow are still
// running until late is closed. Once the lock is released (or forgotten), those nodes are
// released again after their calls end (at most CallTimeout later, in the background), so
// that a late acquire landing after the release does not leave the key behind for a lease.
func (r *Redlock) kindAfter(late <-chan struct{}, got []bool) *kind {
	var slow []int
	for i, ok := range got {
		if !ok {
			slow = append(slow, i)
		}
	}
	if len(slow) == 0 {
		return r.kind
	}
	again := func(h *hold) {
		go func() {
			<-late
			ctx, cancel := r.c.bestEffort(context.Background())
			defer cancel()
			r.releaseOn(ctx, h.k, h.owner, slow, false, true)
		}()
	}
	kd := *r.kind
	kd.release = func(ctx context.Context, h *hold, last bool) (int64, error) {
		if last {
			defer again(h)
		}
		return r.release(ctx, h, last)
	}
	kd.forget = func(ctx context.Context, h *hold) {
		defer again(h)
		r.forget(ctx, h)
	}
	return &kd
}

func (r *Redlock) forget(ctx context.Context, h *hold) {
	cctx, cancel := r.c.bestEffort(ctx)
	defer cancel()
	r.releaseOn(cctx, h.k, h.owner, r.all(), false, true)
}

// renew extends the key on every node: held while a quorum extended it, lost at once when a
// quorum can no longer be reached.
func (r *Redlock) renew(ctx context.Context, h *hold) (bool, error) {
	// Every node is waited for (no early return), so that each node the lock was taken on
	// keeps it as long as it answers.
	replies, _, _ := r.each(ctx, r.all(), func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := renewScript.Run(ctx, rdb, []string{h.k.hash}, h.owner, r.c.lease.Milliseconds()).Int64()
		return nodeReply{n: n, err: err}
	}, nil)
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
	replies, _, _ := r.each(ctx, r.all(), func(ctx context.Context, rdb redis.UniversalClient) nodeReply {
		n, err := ttlScript.Run(ctx, rdb, []string{h.k.hash}, h.owner).Int64()
		return nodeReply{n: n, err: err}
	}, nil)
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

// forgetPayOn is the clean-up of owner on k on one node (forget.lua), as a debt.
func forgetPayOn(rdb redis.UniversalClient, k keys, owner string, lease time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		return forgetScript.Run(ctx, rdb, []string{k.hash, k.gone(owner)}, owner, k.channel, "1",
			lease.Milliseconds()).Err()
	}
}
