package locking

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/testutil"
)

// takeoverOpts are the Options of the takeover tests: a process key of 300ms (three call
// timeouts of 100ms; the storefront's is 1s), under a lease far longer than any wait of these
// tests.
func takeoverOpts(lease time.Duration) *Options {
	return &Options{Lease: lease, CallTimeout: 100 * time.Millisecond, ProcessTTL: 300 * time.Millisecond, Wait: lease}
}

// deadOwner writes the lock hash of key for an owner of a process that has no process key (a
// process that died), with a long lease, as a dead holder leaves it.
func deadOwner(t *testing.T, c *Client, key string) string {
	t.Helper()
	owner := newOwner() + processSep + "deadbeefdeadbeef"
	k := c.keysFor(key)
	require.NoError(t, c.rdb.HSet(context.Background(), k.hash, owner, 1).Err())
	require.NoError(t, c.rdb.PExpire(context.Background(), k.hash, time.Minute).Err())
	return owner
}

func TestTakeoverOfADeadHolder(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			c := newClient(t, nil, takeoverOpts(time.Minute))
			key := uniqueKey(t)
			deadOwner(t, c, key)
			obtain := c.Obtain
			if fair {
				obtain = c.ObtainFair
			}
			start := time.Now()
			l, err := obtain(ctxT(t, 30*time.Second), key, WithTakeover(), WithWait(20*time.Second))
			require.NoError(t, err)
			waited := time.Since(start)
			assert.GreaterOrEqual(t, waited, c.processTTL, "a takeover waiter first waits one ProcessTTL")
			assert.Less(t, waited, 20*time.Second, "taken over, not waited out (the lease is a minute)")
			assert.Positive(t, l.Token())
			require.NoError(t, l.Release(context.Background()))
		})
	}
}

func TestNoTakeoverWithoutTheOption(t *testing.T) {
	c := newClient(t, nil, takeoverOpts(time.Minute))
	key := uniqueKey(t)
	deadOwner(t, c, key)
	_, err := c.Obtain(ctxT(t, 10*time.Second), key, WithWait(3*c.processTTL))
	require.ErrorIs(t, err, ErrNotObtained, "a waiter that did not ask for takeover waits out the lease")
}

func TestNoTakeoverOfAnOwnerWithoutProcess(t *testing.T) {
	c := newClient(t, nil, takeoverOpts(time.Minute))
	key := uniqueKey(t)
	k := c.keysFor(key)
	require.NoError(t, c.rdb.HSet(context.Background(), k.hash, newOwner(), 1).Err()) // a plain holder
	require.NoError(t, c.rdb.PExpire(context.Background(), k.hash, time.Minute).Err())
	_, err := c.Obtain(ctxT(t, 10*time.Second), key, WithTakeover(), WithWait(3*c.processTTL))
	require.ErrorIs(t, err, ErrNotObtained, "a holder that did not ask for takeover is never evicted")
}

func TestNoTakeoverOfALiveProcess(t *testing.T) {
	holder := newClient(t, nil, takeoverOpts(time.Minute))
	waiter := newClient(t, nil, takeoverOpts(time.Minute))
	key := uniqueKey(t)
	l, err := holder.Obtain(ctxT(t, 5*time.Second), key, WithTakeover())
	require.NoError(t, err)
	defer l.Release(context.Background())
	_, err = waiter.Obtain(ctxT(t, 10*time.Second), key, WithTakeover(), WithWait(4*waiter.processTTL))
	require.ErrorIs(t, err, ErrNotObtained, "the holder's process key is renewed: no takeover")
	require.NoError(t, l.Err())
}

func TestProcessKeyLifecycle(t *testing.T) {
	rdb := newRedis(t, nil)
	c := New(rdb, takeoverOpts(time.Minute))
	ctx := ctxT(t, 10*time.Second)
	pk := c.processKey(c.process)
	l, err := c.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	n, err := rdb.Exists(ctx, pk).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "an Obtain without takeover sets no process key")

	l, err = c.Obtain(ctx, uniqueKey(t), WithTakeover())
	require.NoError(t, err)
	_, named := processOf(l.h.owner)
	assert.True(t, named, "a takeover lock names its process")
	ttl, err := rdb.PTTL(ctx, pk).Result()
	require.NoError(t, err)
	assert.Positive(t, ttl)
	assert.LessOrEqual(t, ttl, c.processTTL)
	time.Sleep(2 * c.processTTL) // renewed on the heartbeat's timer
	n, err = rdb.Exists(ctx, pk).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the heartbeat renews the key past its TTL")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	n, err = rdb.Exists(ctx, pk).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "Close deletes the process key")
}

func TestFairTakeoverEvictsDeadQueuedOwners(t *testing.T) {
	c := newClient(t, nil, takeoverOpts(time.Minute))
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	k := c.keysFor(key)
	fk := k.fair()
	deadOwner(t, c, key)
	// Three places of the dead process at the head of the queue, each kept for a minute.
	far := time.Now().Add(time.Minute).UnixMilli()
	for range 3 {
		o := newOwner() + processSep + "deadbeefdeadbeef"
		require.NoError(t, c.rdb.RPush(ctx, fk.queue, o).Err())
		require.NoError(t, c.rdb.ZAdd(ctx, fk.timeouts, redis.Z{Score: float64(far), Member: o}).Err())
	}
	start := time.Now()
	l, err := c.ObtainFair(ctx, key, WithTakeover(), WithWait(20*time.Second))
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 20*time.Second)
	n, err := c.rdb.LLen(ctx, fk.queue).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the dead places left the queue")
	require.NoError(t, l.Release(ctx))
}

func TestObtainManyTakesOverADeadKey(t *testing.T) {
	c := newClient(t, nil, takeoverOpts(time.Minute))
	a, b := uniqueKey(t), uniqueKey(t)
	deadOwner(t, c, b)
	m, err := c.ObtainMany(ctxT(t, 30*time.Second), []KeyFloor{{Key: a}, {Key: b}}, WithTakeover(), WithWait(20*time.Second))
	require.NoError(t, err)
	require.NoError(t, m.Release(context.Background()))
}

// A holder evicted while alive (its process key lapsed: here deleted, its heartbeat stopped,
// as when the process is frozen or cut off from Redis) learns of the loss from its watchdog's
// next renewal, and the new holder's token is greater.
func TestEvictedLiveHolderLearnsItsLoss(t *testing.T) {
	holder := newClient(t, nil, takeoverOpts(3*time.Second))
	waiter := newClient(t, nil, takeoverOpts(time.Minute))
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	l, err := holder.Obtain(ctx, key, WithTakeover())
	require.NoError(t, err)
	holder.stopHeartbeat() // as if frozen: no renewal of the process key, which is deleted
	got, err := waiter.Obtain(ctx, key, WithTakeover(), WithWait(20*time.Second))
	require.NoError(t, err)
	defer got.Release(context.Background())
	assert.Greater(t, got.Token(), l.Token(), "the fence orders the new holder after the old one")
	select {
	case <-l.Done():
		require.ErrorIs(t, l.Err(), ErrLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted holder was never told")
	}
}

// The child mode of TestTakeoverOfAKilledProcess: it obtains the key with takeover, says so on
// stdout, and holds it until killed.
const (
	takeoverChildEnv    = "LOCKING_TEST_TAKEOVER_CHILD_REDIS"
	takeoverChildKeyEnv = "LOCKING_TEST_TAKEOVER_CHILD_KEY"
)

func takeoverChildMain() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(takeoverChildEnv), ContextTimeoutEnabled: true, MaxRetries: -1})
	c := New(rdb, takeoverOpts(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.ObtainFair(ctx, os.Getenv(takeoverChildKeyEnv), WithTakeover())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child obtain:", err)
		return 1
	}
	fmt.Println("held", l.Token())
	<-ctx.Done()
	return 0
}

// A process that holds a lock is killed (SIGKILL: nothing released); a takeover waiter of
// another process takes the lock well before the 30s lease ends, with a greater token.
func TestTakeoverOfAKilledProcess(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess)
	exe, err := os.Executable()
	require.NoError(t, err)
	key := uniqueKey(t)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), takeoverChildEnv+"="+shared.Addr(), takeoverChildKeyEnv+"="+key)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	childToken, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "held ")), 10, 64)
	require.NoError(t, err)

	c := newClient(t, nil, takeoverOpts(30*time.Second))
	got := make(chan *Lock, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := c.ObtainFair(ctxT(t, 40*time.Second), key, WithTakeover(), WithWait(30*time.Second))
		errs <- err
		got <- l
	}()
	time.Sleep(c.processTTL) // the waiter waits behind a live holder first
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	require.NoError(t, <-errs)
	l := <-got
	gap := time.Since(killed)
	t.Logf("taken over %v after the kill (ProcessTTL %v, lease 30s)", gap, c.processTTL)
	assert.Less(t, gap, 10*time.Second, "taken over, not waited out")
	assert.Greater(t, l.Token(), childToken)
	require.NoError(t, l.Release(context.Background()))
}

// Permits of a dead process (their ids name it, its process key is gone) are taken back by a
// WithTakeover Acquire, without waiting one ProcessTTL itself (admission waits are short), once
// per ProcessTTL/3 per key; without the option they stay until their lease.
func TestSemaphoreTakesBackDeadPermits(t *testing.T) {
	rdb := newRedis(t, nil)
	s := NewSemaphore(rdb, 2, takeoverOpts(time.Minute))
	t.Cleanup(func() { _ = s.Close() })
	ctx := ctxT(t, 30*time.Second)
	key := uniqueKey(t)
	k := s.keysFor(key)
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	for i := range 2 {
		id := newOwner() + processSep + "deadbeefdeadbeef"
		require.NoError(t, rdb.ZAdd(ctx, k.hash, redis.Z{Score: far, Member: id}).Err())
		require.NoError(t, rdb.ZAdd(ctx, k.fence, redis.Z{Score: float64(i + 1), Member: id}).Err())
	}
	require.NoError(t, rdb.Set(ctx, semKeys(k)[2], 2, 0).Err()) // the tickets they drew
	_, err := s.Acquire(ctx, key, WithWait(200*time.Millisecond))
	require.ErrorIs(t, err, ErrNotObtained, "without takeover the dead permits stay")
	p, err := s.Acquire(ctx, key, WithWait(200*time.Millisecond), WithTakeover())
	require.NoError(t, err, "the dead process's permits are taken back")
	n, err := rdb.ZCard(ctx, k.hash).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "both dead permits gone, one taken")
	require.NoError(t, p.Release(ctx))
}

// Once a check found a process dead, this Client's other takeover Obtains check at their first
// failed attempt (the dead process's other locks: a cart's next key), and TryObtainFair checks
// before its one attempt, instead of first waiting one ProcessTTL each.
func TestKnownDeathTakesOverAtOnce(t *testing.T) {
	c := newClient(t, nil, takeoverOpts(time.Minute))
	ctx := ctxT(t, 30*time.Second)
	a, b, d := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	for _, k := range []string{a, b, d} {
		deadOwner(t, c, k)
	}
	l, err := c.ObtainFair(ctx, a, WithTakeover(), WithWait(20*time.Second))
	require.NoError(t, err, "the first takeover waits one ProcessTTL, then checks")
	require.NoError(t, l.Release(ctx))
	require.True(t, c.sawDeath(time.Now()))

	l, err = c.ObtainFair(ctx, b, WithTakeover(), WithWait(c.processTTL/2))
	require.NoError(t, err, "a known death: checked at the first failed attempt")
	require.NoError(t, l.Release(ctx))
	l, err = c.TryObtainFair(ctx, d, WithTakeover())
	require.NoError(t, err, "a known death: a try checks before its attempt")
	require.NoError(t, l.Release(ctx))
}

// Takeover costs no round trip where nothing fails: after the Client's first takeover Obtain
// (which sets its process key once), an uncontended Obtain, ObtainFair or ObtainMany with
// WithTakeover sends exactly the commands it sends without it.
func TestTakeoverCostsNoRoundTripUncontended(t *testing.T) {
	rdb := newRedis(t, nil)
	counter := &countCommands{}
	rdb.AddHook(counter)
	c := New(rdb, &Options{Lease: time.Minute, ProcessTTL: time.Minute}) // no heartbeat during the count
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Obtain(ctx, uniqueKey(t), WithTakeover()) // sets the process key
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	count := func(obtain func(...ObtainOption) (interface{ Release(context.Context) error }, error), opts ...ObtainOption) int64 {
		before := counter.n.Load()
		l, err := obtain(opts...)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return counter.n.Load() - before
	}
	kinds := map[string]func(...ObtainOption) (interface{ Release(context.Context) error }, error){
		"Obtain": func(o ...ObtainOption) (interface{ Release(context.Context) error }, error) {
			return c.Obtain(ctx, uniqueKey(t), o...)
		},
		"ObtainFair": func(o ...ObtainOption) (interface{ Release(context.Context) error }, error) {
			return c.ObtainFair(ctx, uniqueKey(t), o...)
		},
		"ObtainMany": func(o ...ObtainOption) (interface{ Release(context.Context) error }, error) {
			return c.ObtainMany(ctx, []KeyFloor{{Key: uniqueKey(t)}, {Key: uniqueKey(t)}}, o...)
		},
	}
	for name, obtain := range kinds {
		count(obtain) // the scripts' first EVALSHA answers NOSCRIPT: load them first
		plain, taken := count(obtain), count(obtain, WithTakeover())
		assert.Equal(t, plain, taken, "%s: commands without and with WithTakeover", name)
		assert.Positive(t, plain, name)
	}
}

// stallSet is a go-redis hook that holds every SET of key until release is closed, as a
// Redis that does not answer.
type stallSet struct {
	key     string
	started chan struct{} // closed when the first such SET is held
	release chan struct{}
	once    sync.Once
}

func (s *stallSet) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *stallSet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *stallSet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "set") && len(cmd.Args()) > 1 && cmd.Args()[1] == s.key {
			s.once.Do(func() { close(s.started) })
			<-s.release
		}
		return next(ctx, cmd)
	}
}

// An Obtain queued behind the first write of the process key waits only as long as its
// context allows (the write is serialised on a channel, not a mutex held across the call).
func TestProcessKeyWaitHonoursTheContext(t *testing.T) {
	rdb := newRedis(t, nil)
	c := New(rdb, takeoverOpts(time.Minute))
	t.Cleanup(func() { _ = c.Close() })
	stall := &stallSet{key: c.processKey(c.process), started: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(stall)
	first := make(chan error, 1)
	go func() { // owner: the test, which receives its result
		l, err := c.Obtain(ctxT(t, 10*time.Second), uniqueKey(t), WithTakeover())
		if err == nil {
			err = l.Release(context.Background())
		}
		first <- err
	}()
	<-stall.started
	// The stalled write ends after 2s whatever happens: a queued Obtain that waits for it
	// (a mutex) fails the test instead of hanging it.
	timer := time.AfterFunc(2*time.Second, func() { close(stall.release) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Obtain(ctx, uniqueKey(t), WithTakeover())
	waited := time.Since(start)
	if timer.Stop() {
		close(stall.release)
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, waited, time.Second, "the queued Obtain ended with its context, not with the first write")
	require.NoError(t, <-first)
}
