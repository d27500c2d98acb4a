package locking

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redisproc"
	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/internal/testutil"
)

// sentinelBreaker is a Sentinel set, a failover client of it behind the breaker named as the
// storefront names it ("master NAME"), and a Client over it.
type sentinelBreaker struct {
	set *redisproc.SentinelSet
	brk *Breakers
	b   *Breaker
	c   *Client
}

func startSentinelBreaker(t *testing.T) *sentinelBreaker {
	t.Helper()
	s := &sentinelBreaker{set: redistest.StartSentinel(t)}
	s.brk = NewBreakers(&BreakerOptions{ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = s.brk.Close() })
	rdb := redistest.FailoverClient(t, s.set)
	s.b = s.brk.Watch("master "+s.set.MasterName, rdb)
	// The storefront's call timeout: one a loaded machine does not miss on a healthy master.
	s.c = New(rdb, &Options{Lease: 10 * time.Second, CallTimeout: 250 * time.Millisecond, Breakers: s.brk})
	t.Cleanup(func() { _ = s.c.Close() })
	l, err := s.c.Obtain(ctxT(t, 5*time.Second), uniqueKey(t)) // the pool has a connection to the master
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	return s
}

// stop SIGSTOPs srv until the test ends (or until the returned func continues it).
func stop(t *testing.T, srv *redisproc.Server) (cont func()) {
	t.Helper()
	require.NoError(t, srv.Signal(syscall.SIGSTOP))
	stopped := true
	cont = func() {
		if stopped {
			_ = srv.Signal(syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(cont)
	return cont
}

// Through Sentinel, a hung master opens the master's breaker like any hung node: three
// timeouts, then every lock call fails at once. The Sentinels then fail it over; the probe
// reaches the promoted replica through the failover client, the breaker closes, and locks
// are taken again, on the new master.
func TestBreakerSentinelHungMaster(t *testing.T) {
	testutil.SkipShort(t, testutil.Fault) // a Sentinel failover
	s := startSentinelBreaker(t)
	ctx := ctxT(t, 60*time.Second)
	old, err := s.set.MasterAddr(ctx)
	require.NoError(t, err)
	stop(t, s.set.Master)

	for i := 0; i < 5 && s.b.State() == BreakerClosed; i++ {
		_, _ = s.c.TryObtain(ctx, uniqueKey(t))
	}
	require.NotEqual(t, BreakerClosed, s.b.State(), "the hung master opened it")
	_, err = s.c.TryObtain(ctx, uniqueKey(t))
	assert.ErrorIs(t, err, ErrBreakerOpen, "refused at once while open")

	var l *Lock
	require.Eventually(t, func() bool {
		l, err = s.c.TryObtain(ctx, uniqueKey(t))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "locks after the failover: %v", err)
	require.NoError(t, l.Release(ctx))
	assert.Equal(t, BreakerClosed, s.b.State())
	// The old master is stopped: the lock was taken on the promoted replica, which every
	// Sentinel names in time (the first to answer may not have learned it yet).
	assert.Eventually(t, func() bool {
		now, err := s.set.MasterAddr(ctx)
		return err == nil && now != old
	}, 10*time.Second, 50*time.Millisecond, "the Sentinels name the promoted replica")
}

// Hung Sentinels are not a hung master as long as the failover client has connections: it
// asks a Sentinel only to find the master for a new connection, so with every Sentinel
// stopped sequential locks go on over the connection it has, and the master's breaker stays
// closed. Concurrent locks that need new connections cannot resolve the master: they fail
// (as the master would look from here: unreachable), which opens the breaker. Once the
// Sentinels answer, a probe closes it and concurrent locks go through again.
func TestBreakerSentinelHungSentinels(t *testing.T) {
	testutil.SkipShort(t, testutil.MultiProcess) // a Sentinel set
	s := startSentinelBreaker(t)
	ctx := ctxT(t, 30*time.Second)
	var conts []func()
	for _, sn := range s.set.Sentinels {
		conts = append(conts, stop(t, sn))
	}
	for i := 0; i < 50; i++ {
		l, err := s.c.TryObtain(ctx, uniqueKey(t))
		require.NoError(t, err, "lock %d with every Sentinel hung", i)
		require.NoError(t, l.Release(ctx))
	}
	assert.Equal(t, BreakerClosed, s.b.State(), "sequential locks over the pooled connection")
	concurrent := func() (failed int) {
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				l, err := s.c.TryObtain(ctx, uniqueKey(t))
				if err == nil {
					err = l.Release(ctx)
				}
				errs <- err
			}()
		}
		for range 8 {
			if <-errs != nil {
				failed++
			}
		}
		return failed
	}
	assert.Positive(t, concurrent(), "new connections cannot find the master while every Sentinel hangs")
	for _, cont := range conts {
		cont()
	}
	require.Eventually(t, func() bool { return s.b.State() == BreakerClosed && concurrent() == 0 },
		10*time.Second, 50*time.Millisecond, "concurrent locks once the Sentinels answer")
}
