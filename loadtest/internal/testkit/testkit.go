package testkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/testutil"
)

// Storefront is the storefront binary a package's TestMain built (Main); SkipReason says why
// it is missing.
var Storefront, SkipReason string

// Main is a TestMain: it builds the storefront at root (the module's directory, relative to
// the package under test) once, or takes the one STOCKGUARD_BIN names (make test's, built once
// per run: internal/storefrontbin), runs the tests, and fails the run when a goroutine leaked.
func Main(m *testing.M, root string) int {
	dir, err := os.MkdirTemp("", "loadtest-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	if testing.Short() {
		SkipReason = "-short skips the " + testutil.MultiProcess + " tests (make test runs them): self-contained runs start several storefronts"
	} else if _, err := os.Stat(filepath.Join(root, "main.go")); err != nil {
		SkipReason = "the storefront's main.go is not there yet: self-contained runs skipped"
	} else if Storefront, err = storefrontbin.Shared(ctx, root, dir); err != nil { // make test's build when STOCKGUARD_BIN names it
		SkipReason = "the storefront does not build yet: " + err.Error()
	}
	cancel()
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(toxiproxySend); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// toxiproxySend is the one goroutine of a library the leak check leaves out: toxiproxy v2.5.0's
// NoopToxic.Pipe sends a chunk on its stub's output without watching its interrupt
// (toxics/noop.go:16), so a link's stub whose next stub stopped reading (a toxic removed or the
// proxy stopped with a chunk in flight, as internal/netfault's Heal and Close do) blocks there
// for good. Seen once in a clean-clone make test (run 22: "chan send, 3 minutes"). It is the
// fault injector's goroutine, not the storefront's or the harness's; internal/netfault's own
// tests leave out toxiproxy's ToxicCollection the same way.
var toxiproxySend = goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe")

// NeedStorefront skips the test when Main could not build the storefront.
func NeedStorefront(t *testing.T) {
	t.Helper()
	if Storefront == "" {
		t.Skip(SkipReason)
	}
}

// NeedClock skips the test without redis-server and a C compiler (-chaos clock's shim).
func NeedClock(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"redis-server", "cc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("-chaos clock needs %s on PATH", bin)
		}
	}
}

// Tlog sends progress lines to the test log.
type Tlog struct{ T *testing.T }

func (w Tlog) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// AssertGone checks that every process of the run has exited.
func AssertGone(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		err := syscall.Kill(pid, 0)
		assert.True(t, errors.Is(err, syscall.ESRCH), "process %d still exists (kill 0: %v)", pid, err)
	}
}

// Children returns the live child processes of the test binary and their state (R, S, T...).
func Children(t *testing.T) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	out := map[int]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after the last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		var pid, ppid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || len(fields) < 2 {
			continue
		}
		if _, err := fmt.Sscan(fields[1], &ppid); err == nil && ppid == os.Getpid() && fields[0] != "Z" {
			out[pid] = fields[0]
		}
	}
	return out
}
