package locking

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/internal/redistest"
)

// shared is the redis-server of the tests that neither stop nor pause it.
var shared *redistest.Server

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	if os.Getenv(pauseChildEnv) != "" {
		os.Exit(pauseChildMain())
	}
	if os.Getenv(takeoverChildEnv) != "" {
		os.Exit(takeoverChildMain())
	}
	srv, err := redistest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	_ = srv.Close()
	if code == 0 {
		if err := findLeaks(3 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks looks for goroutines left over for up to patience: a go-redis client whose
// server was stopped keeps a dialling goroutine that sleeps a second between tries and
// ends at its next wake-up once the client is closed (goleak.Find alone waits about 0.4 s).
func findLeaks(patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var keySeq atomic.Int64

// uniqueKey returns a key no other test uses. Keys of one test sort in the order they were
// made (the counter is zero-padded: "-10" would sort before "-9"), which the tests of ObtainMany,
// which takes its keys in sorted order, rely on.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s-%08d", t.Name(), keySeq.Add(1))
}

// newRedis returns a client of srv (shared when nil), closed when t ends.
func newRedis(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	if srv == nil {
		srv = shared
	}
	return srv.Client(t)
}

// loaded gives Options that shorten the lease and leave CallTimeout unset a call bound of a
// quarter of the lease, at most 250 ms, where the default is less (a tenth of the lease, 50 ms
// at 500 ms; a Redlock's, a hundredth): make test's load (two cores, -race, four packages at
// once) has made single Redis calls take over 100 ms, and tests with a 300 ms to 1 s lease
// failed on "i/o timeout" or "context deadline exceeded" at random. A default lease's bound
// (2 s) is untouched, and a test about the call bound sets CallTimeout itself. newClient,
// newSemaphore and newRedlock pass their Options through it; tests that call New themselves
// keep theirs.
func loaded(opts *Options) *Options {
	if opts == nil || opts.CallTimeout != 0 || opts.Lease <= 0 {
		return opts
	}
	o := *opts
	if d := min(o.Lease/4, 250*time.Millisecond); d > o.callTimeout() {
		o.CallTimeout = d
	}
	return &o
}

// newClient returns a locking Client over a fresh connection, closed when t ends; its
// Options go through loaded.
func newClient(t testing.TB, srv *redistest.Server, opts *Options) *Client {
	t.Helper()
	c := New(newRedis(t, srv), loaded(opts))
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// verifyNoLeaks checks at the end of t that no goroutine of t is left.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
