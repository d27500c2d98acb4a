package locking

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/netfault"
	"github.com/stockguard/stockguard/internal/testutil"
)

// The child mode of TestBreakerIgnoresOwnPause: the test binary re-executed with pauseChildEnv
// set to a Redis address runs pauseChildMain instead of the tests.
const pauseChildEnv = "LOCKING_TEST_PAUSE_CHILD_REDIS"

// pauseReport is what the child prints for each "report" line on its stdin: counts so far.
type pauseReport struct {
	Opened     int64 `json:"opened"`     // transitions of its breaker to open
	Discounted int64 `json:"discounted"` // failed calls not counted: their deadline passed during the pause
	Obtained   int64 `json:"obtained"`
	Stopped    int64 `json:"stopped"`      // attempts answered ErrNotObtained joined with errStopped
	RedisErrs  int64 `json:"redis_errors"` // attempts that failed with anything but ErrNotObtained
}

// A stopped process (a GC or VM pause: SIGSTOP here) is not a hung Redis. The child runs 32
// lock loops on a healthy Redis behind a link that adds 100ms each way, so that most of its
// calls are in flight when it is stopped; it stays stopped 5s, well past their 2s call timeout.
// When it continues, a call whose deadline timer runs before its reply is read fails (Go reads
// the reply instead when the socket's readiness is seen first): the breaker must not count
// those failures (it would open, and a storefront would answer 503 unavailable with Redis
// healthy), and the attempts it failed are a lock not obtained, not a Redis failure. The test stops the child until one pause made at least the breaker's failure
// count of calls fail (up to four pauses), so that without the rule the breaker would have
// opened: the child's report proves the case arose.
func TestBreakerIgnoresOwnPause(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess) // spawns a process
	link, err := netfault.NewLink(shared.Addr())
	require.NoError(t, err)
	defer link.Close()
	require.NoError(t, link.Latency(100*time.Millisecond))
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), pauseChildEnv+"="+link.Addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line, "the child's locks go round")
	dec := json.NewDecoder(out)

	var rep pauseReport
	most := int64(0) // the most failures discounted over one pause
	for pause := 0; pause < 4 && most < DefaultBreakerFailures; pause++ {
		time.Sleep(300 * time.Millisecond) // the loops' calls in flight
		require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(5 * time.Second)
		require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
		time.Sleep(2 * time.Second) // the resumed calls fail, then locks go round again
		before := rep.Discounted
		_, err := io.WriteString(stdin, "report\n")
		require.NoError(t, err)
		require.NoError(t, dec.Decode(&rep))
		most = max(most, rep.Discounted-before)
		t.Logf("after pause %d: %+v", pause+1, rep)
	}
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	require.GreaterOrEqual(t, most, int64(DefaultBreakerFailures), "one pause failed enough calls to open the breaker")
	assert.Zero(t, rep.Opened, "the breaker opened on the process's own pause")
	assert.Positive(t, rep.Obtained)
	// An attempt the pause failed ends as a lock not obtained (a storefront's lock_timeout),
	// not as a Redis failure (its 503 unavailable). (In these runs the calls in flight at the
	// stop were mostly releases: TestStoppedThrough checks the rule itself.)
	assert.Zero(t, rep.RedisErrs, "attempts failed as Redis errors")
	t.Logf("attempts answered as stopped: %d", rep.Stopped)
}

// countHandler counts the log records whose message is msg.
type countHandler struct {
	msg string
	n   *atomic.Int64
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

func pauseChildMain() int {
	var rep pauseReport
	var discounted atomic.Int64
	brk := NewBreakers(&BreakerOptions{
		Logger: slog.New(countHandler{msg: pausedMsg, n: &discounted}),
		OnState: func(_ string, st BreakerState) {
			if st == BreakerOpen {
				atomic.AddInt64(&rep.Opened, 1)
			}
		},
	})
	defer brk.Close()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(pauseChildEnv), ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 32})
	defer rdb.Close()
	brk.Watch("node", rdb)
	c := New(rdb, &Options{Lease: 10 * time.Second, CallTimeout: 2 * time.Second, Breakers: brk})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ready sync.Once
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("pause-child-%d-%d", os.Getpid(), i)
			// Spread over one round (two calls of two 100ms hops): at the stop some loops
			// wait on an acquire, others on a release.
			time.Sleep(time.Duration(i) * 400 * time.Millisecond / 32)
			for ctx.Err() == nil {
				l, err := c.TryObtain(ctx, key)
				switch {
				case errors.Is(err, errStopped):
					atomic.AddInt64(&rep.Stopped, 1)
				case err != nil && !errors.Is(err, ErrNotObtained) && ctx.Err() == nil:
					atomic.AddInt64(&rep.RedisErrs, 1)
				}
				if err != nil {
					continue
				}
				atomic.AddInt64(&rep.Obtained, 1)
				ready.Do(func() { fmt.Println("ready") })
				_ = l.Release(ctx)
			}
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() { // "report": the counts so far; the test closes stdin at the end
		out := pauseReport{Opened: atomic.LoadInt64(&rep.Opened), Discounted: discounted.Load(),
			Obtained: atomic.LoadInt64(&rep.Obtained), Stopped: atomic.LoadInt64(&rep.Stopped),
			RedisErrs: atomic.LoadInt64(&rep.RedisErrs)}
		if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
			break
		}
	}
	cancel()
	wg.Wait()
	return 0
}

// The rule that tells a call failed by this process's own pause, on a fabricated clock: a
// call whose deadline passed longer ago than its whole budget (and than minPauseGap) failed
// while the process was stopped; one that failed at its deadline, a reply from Redis, or a
// refusal of the breaker did not.
func TestStoppedThrough(t *testing.T) {
	timeout := fmt.Errorf("read tcp: %w", context.DeadlineExceeded)
	deadline := func(late time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-late))
		t.Cleanup(cancel)
		return ctx
	}
	const budget = 250 * time.Millisecond
	cases := []struct {
		name string
		late time.Duration // how long ago the deadline passed
		err  error
		want bool
	}{
		{"stopped 3s past its deadline", 3 * time.Second, timeout, true},
		{"failed at its deadline", 5 * time.Millisecond, timeout, false},
		{"late, but less than its budget", budget / 2, timeout, false},
		{"late by more than its budget, less than a second", 3 * budget, timeout, false},
		{"a reply from Redis", 3 * time.Second, redis.Nil, false},
		{"refused by an open breaker", 3 * time.Second, ErrBreakerOpen, false},
		{"no error", 3 * time.Second, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(tc.late)
			dl, _ := ctx.Deadline()
			assert.Equal(t, tc.want, stoppedThrough(ctx, dl.Add(-budget), tc.err))
		})
	}
	assert.False(t, pausedThrough(context.Background(), time.Now().Add(-time.Hour)), "a call without a deadline")
}
