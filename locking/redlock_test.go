package locking

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// startNodes starts n redis-servers and returns them with a client of each. The clients
// dial a stopped node once, not five times 100ms apart (go-redis's default).
func startNodes(t testing.TB, n int) ([]*redistest.Server, []*redis.Client) {
	t.Helper()
	srvs := make([]*redistest.Server, n)
	rdbs := make([]*redis.Client, n)
	for i := range n {
		srvs[i] = redistest.Start(t)
		opts := srvs[i].Options()
		opts.DialerRetries = 1
		rdbs[i] = redis.NewClient(opts)
		t.Cleanup(func() { _ = rdbs[i].Close() })
	}
	return srvs, rdbs
}

// newRedlock returns a Redlock over rdbs, closed when t ends; its Options go through loaded.
func newRedlock(t testing.TB, rdbs []*redis.Client, opts *Options) *Redlock {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, c := range rdbs {
		nodes[i] = c
	}
	r := NewRedlock(nodes, loaded(opts))
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

// waitNoHolders waits until no node holds key: Release returns once a quorum released it.
func waitNoHolders(t *testing.T, r *Redlock, rdbs []*redis.Client, key string) {
	t.Helper()
	waitHolders(t, r, rdbs, key, 0)
}

// waitHolders waits until n nodes hold key: Obtain returns once a quorum took it.
func waitHolders(t *testing.T, r *Redlock, rdbs []*redis.Client, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return holders(t, r, rdbs, key) == n }, 2*time.Second, 5*time.Millisecond,
		"%d nodes hold the lock", n)
}

// holders returns how many nodes hold key's lock hash.
func holders(t *testing.T, r *Redlock, rdbs []*redis.Client, key string) int {
	t.Helper()
	n := 0
	for _, c := range rdbs {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		e, err := c.Exists(ctx, r.c.keysFor(key).hash).Result()
		cancel()
		if err == nil && e == 1 {
			n++
		}
	}
	return n
}

func TestRedlockQuorumOfFive(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs, &Options{Lease: 2 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	assert.Equal(t, 3, r.Quorum())

	l, err := r.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Positive(t, l.Token())
	waitHolders(t, r, rdbs, key, 5)
	ttl, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 2*time.Second, ttl, float64(200*time.Millisecond))
	_, err = r.TryObtain(ctx, key)
	assert.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, l.Release(ctx))
	waitNoHolders(t, r, rdbs, key)
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)

	srvs[3].Stop()
	srvs[4].Stop()
	l, err = r.Obtain(ctx, key)
	require.NoError(t, err, "works with 2 of 5 nodes stopped")
	assert.Equal(t, 3, holders(t, r, rdbs, key))
	require.NoError(t, l.Release(ctx))
	assert.Zero(t, holders(t, r, rdbs, key))

	srvs[2].Stop()
	start := time.Now()
	_, err = r.Obtain(ctx, key)
	require.Error(t, err, "refuses with 3 of 5 nodes stopped")
	assert.NotErrorIs(t, err, ErrNotObtained, "a Redis failure, not a held lock")
	assert.ErrorContains(t, err, "2 of 5 nodes answered")
	assert.Less(t, time.Since(start), time.Second, "does not keep retrying")
	assert.Zero(t, holders(t, r, rdbs, key), "the minority it took is released")
}

// stallAfterReply sleeps after each script reply while armed, ignoring the context: a client
// stalled between sending and using the reply (GC pause, descheduled VM). It counts the
// release-script calls on the lock hash key (and only on it: the releases of an earlier
// round on another key, which go on after Release returned, are not counted).
type stallAfterReply struct {
	armed    atomic.Bool
	stall    time.Duration
	key      atomic.Pointer[string]
	releases atomic.Int32
}

// on reports whether the script call args (EVAL or EVALSHA: script, numkeys, KEYS...) is
// on the counted key.
func (s *stallAfterReply) on(args []any) bool {
	k := s.key.Load()
	return k != nil && len(args) > 3 && args[3] == *k
}

func (s *stallAfterReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *stallAfterReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *stallAfterReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 && cmd.Name() == "eval" && args[1] == include(forgetLua, "release.lua", releaseLua) && s.on(args) {
			s.releases.Add(1) // a clean-up (forget.lua) on a node where it was not cached yet
		}
		if len(args) > 1 && cmd.Name() == "evalsha" {
			// a release, or a clean-up (forget.lua), that ran (not answered NOSCRIPT)
			if (args[1] == releaseScript.Hash() || args[1] == forgetScript.Hash()) && !isNoScript(err) {
				if !s.on(args) {
					return err
				}
				s.releases.Add(1)
			} else if s.armed.Load() && args[1] == acquireScript.Hash() {
				time.Sleep(s.stall)
			}
		}
		return err
	}
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

func TestRedlockSlowAcquisitionNotHeld(t *testing.T) {
	const lease = 300 * time.Millisecond
	_, rdbs := startNodes(t, 5)
	hook := &stallAfterReply{stall: lease}
	for _, c := range rdbs {
		c.AddHook(hook)
		require.NoError(t, c.Ping(context.Background()).Err())
	}
	var acquired atomic.Int32
	r := newRedlock(t, rdbs, &Options{Lease: lease, Hooks: Hooks{
		Acquired: func(string, int64, time.Duration) { acquired.Add(1) },
	}})
	ctx := ctxT(t, 10*time.Second)
	// Load the scripts, so that the stall hits EVALSHA replies, on another key: the releases
	// of that round may still be running (Release returns once a quorum released).
	warm := uniqueKey(t)
	l, err := r.TryObtain(ctx, warm)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	waitNoHolders(t, r, rdbs, warm)
	acquired.Store(0)
	key := uniqueKey(t)
	hash := r.c.keysFor(key).hash
	hook.key.Store(&hash)

	hook.armed.Store(true)
	_, err = r.TryObtain(ctx, key)
	hook.armed.Store(false)
	assert.ErrorIs(t, err, ErrNotObtained, "taken on every node, but after its validity")
	assert.Zero(t, acquired.Load(), "never reported as held")
	assert.EqualValues(t, 5, hook.releases.Load(), "released on every node it took")
	assert.Zero(t, holders(t, r, rdbs, key))

	l, err = r.TryObtain(ctx, key)
	require.NoError(t, err, "free again")
	require.NoError(t, l.Release(ctx))
}

func TestRedlockMutualExclusion32(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	verifyNoLeaks(t)
	_, rdbs := startNodes(t, 5)
	// A generous per-node timeout: 160 concurrent calls on a loaded 2-core test machine.
	r := newRedlock(t, rdbs, &Options{Lease: 5 * time.Second, CallTimeout: time.Second,
		Spin: &SpinOptions{MaxBackoff: 10 * time.Millisecond}})
	// The property is exclusion and token order, not how long a contender waits: no wait
	// limit but the context (a loaded machine starved a contender past the default 10s), and
	// a round that failed on Redis (fewer than a quorum answered within the call timeout)
	// holds nothing and is tried again.
	ctx := ctxT(t, 2*time.Minute)
	key := uniqueKey(t)
	obtain := func() (*Lock, error) {
		for {
			l, err := r.Obtain(ctx, key, WithWait(-1))
			if err == nil || errors.Is(err, ErrNotObtained) || ctx.Err() != nil {
				return l, err
			}
			t.Logf("a round failed on Redis, tried again: %v", err)
		}
	}
	var (
		mu     sync.Mutex
		inside int
		last   int64
		total  int
		wg     sync.WaitGroup
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				l, err := obtain()
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				inside++
				assert.Equal(t, 1, inside, "two holders at once")
				assert.Greater(t, l.Token(), last, "tokens increase")
				last = l.Token()
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				inside--
				total++
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 96, total)
	waitNoHolders(t, r, rdbs, key)
}

func TestRedlockTokensIncreaseAcrossOverlappingQuorums(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs, &Options{Lease: 2 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	fence := r.c.keysFor(key).fence
	for _, i := range []int{0, 1} { // nodes 0 and 1 have issued many tokens
		require.NoError(t, rdbs[i].Set(ctx, fence, 100, 0).Err())
	}

	srvs[3].Stop()
	srvs[4].Stop()
	first, err := r.Obtain(ctx, key) // quorum {0, 1, 2}
	require.NoError(t, err)
	assert.EqualValues(t, 101, first.Token())
	n, err := rdbs[2].Get(ctx, fence).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 101, n, "node 2's counter was raised to the token")
	require.NoError(t, first.Release(ctx))

	srvs[3].Restart(t)
	srvs[4].Restart(t)
	for _, i := range []int{3, 4} { // let the pools replace their broken connections
		require.Eventually(t, func() bool { return rdbs[i].Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	}
	srvs[0].Stop()
	srvs[1].Stop()
	second, err := r.Obtain(ctx, key) // quorum {2, 3, 4}: overlaps the first in node 2 only
	require.NoError(t, err)
	assert.Greater(t, second.Token(), first.Token(), "without the write-back, the node both quorums share would issue token 2 again")
	for _, i := range []int{2, 3, 4} {
		n, err := rdbs[i].Get(ctx, fence).Int64()
		require.NoError(t, err)
		assert.Equal(t, second.Token(), n)
	}
	require.NoError(t, second.Release(ctx))

	third, err := r.Obtain(ctx, key, WithFloor(500))
	require.NoError(t, err)
	assert.EqualValues(t, 501, third.Token(), "the floor applies")
	require.NoError(t, third.Release(ctx))
}

func TestRedlockWatchdogAndLoss(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	// A lease of 1.2 s and calls of 300 ms (its quarter, the most Options allows): with a
	// 300 ms lease every call had 50 ms, and on a loaded machine all five nodes' calls timed
	// out (a CI run: "i/o timeout" from each).
	const lease = 1200 * time.Millisecond
	srvs, rdbs := startNodes(t, 5)
	var lost atomic.Int32
	r := newRedlock(t, rdbs, &Options{Lease: lease, CallTimeout: lease / 4, Hooks: Hooks{Lost: func(string, error) { lost.Add(1) }}})
	ctx := ctxT(t, 10*time.Second)

	// Renewed on a quorum past several leases, then lost when a quorum forgets the key.
	key := uniqueKey(t)
	l, err := r.Obtain(ctx, key)
	require.NoError(t, err)
	time.Sleep(3 * lease)
	require.NoError(t, l.Err())
	// Renewed on a quorum: a node whose renewal missed its call budget on a loaded machine
	// may have let the key expire, which the lock tolerates below a quorum.
	assert.GreaterOrEqual(t, holders(t, r, rdbs, key), 3)
	for i := range 3 {
		require.NoError(t, rdbs[i].FlushDB(ctx).Err())
	}
	select {
	case <-l.Done():
	case <-time.After(2 * lease):
		t.Fatal("loss not signalled")
	}
	assert.ErrorIs(t, l.Err(), ErrLost)
	assert.ErrorIs(t, l.Release(ctx), ErrNotHeld)

	// Nodes stopped: loss is declared before the lease could run out.
	key = uniqueKey(t)
	l, err = r.Obtain(ctx, key)
	require.NoError(t, err)
	for i := range 3 {
		srvs[i].Stop()
	}
	start := time.Now()
	select {
	case <-l.Done():
		assert.Less(t, time.Since(start), lease)
	case <-time.After(2 * lease):
		t.Fatal("loss not signalled")
	}
	assert.ErrorIs(t, l.Err(), ErrLost)
	assert.EqualValues(t, 2, lost.Load())
	_ = l.Release(ctx)
}

func TestRedlockReentry(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs, nil)
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	outer, err := r.Obtain(ctx, key)
	require.NoError(t, err)
	inner, err := r.Obtain(outer.Context(ctx), key)
	require.NoError(t, err)
	assert.Equal(t, outer.Token(), inner.Token())
	require.NoError(t, inner.Release(ctx))
	waitHolders(t, r, rdbs, key, 3) // an inner release keeps the lock

	// A plain Client on one of the nodes does not re-enter a Redlock's lock.
	plain := New(rdbs[0], nil)
	defer plain.Close()
	_, err = plain.TryObtain(outer.Context(ctx), key)
	assert.ErrorIs(t, err, ErrNotObtained)

	require.NoError(t, outer.Release(ctx))
	waitNoHolders(t, r, rdbs, key)
	_, err = NewRedlock(nil, nil).Obtain(ctx, key)
	assert.ErrorIs(t, err, ErrNoNodes)
}

func TestRedlockBlackHoledMinorityCostsNothing(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault)
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs, &Options{CallTimeout: time.Second})
	ctx := ctxT(t, 10*time.Second)
	key := uniqueKey(t)
	srvs[3].Pause()
	srvs[4].Pause()
	defer srvs[3].Resume()
	defer srvs[4].Resume()

	start := time.Now()
	l, err := r.Obtain(ctx, key)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 500*time.Millisecond, "does not wait for the paused nodes")
	start = time.Now()
	require.NoError(t, l.Release(ctx))
	assert.Less(t, time.Since(start), 500*time.Millisecond, "released once a quorum released")
	srvs[3].Resume()
	srvs[4].Resume()
	waitNoHolders(t, r, rdbs, key) // the late acquires on the paused nodes are released too
	assert.Equal(t, 1000*time.Millisecond, r.c.callTimeout)
	assert.Equal(t, 300*time.Millisecond, NewRedlock(nil, nil).c.callTimeout, "default: Lease/100")
}
