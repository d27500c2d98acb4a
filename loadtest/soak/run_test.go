package soak_test

// The soak's runs end to end: scenario.Run with -soak against real storefront processes. They
// live here, not in loadtest/scenario, so that their minute of wall time runs beside the
// scenario package's other tests (another test binary) instead of after them: that package was
// the longest chain of make test (docs/architecture.md#tests).

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/scenario"
	"github.com/stockguard/stockguard/loadtest/soak"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m, filepath.Join("..", ".."))) }

// soakArgs is the short soak of the tests: one round of every fault kind at a half-second
// lease (the run is held until the round has fired), a sample a second, a 4s warm-up, 8
// clients (a later flag in more wins). A soak judges growth over time, not throughput: 8
// clients instead of the default 32 still sell thousands of units a run, at about half the
// CPU (42 s of CPU instead of 69 s for the three workloads: docs/architecture.md#tests).
func soakArgs(bin string, more ...string) []string {
	return append([]string{"-bin", bin, "-chaos", "mix", "-soak", "-strategies", "guard", "-duration", "8s",
		"-lease", "500ms", "-mix-gap", "200ms", "-mix-rounds", "1", "-soak-every", "1s", "-soak-warmup", "4s",
		"-check-timeout", "30s", "-quiet", "-concurrency", "8"}, more...)
}

// TestSoakCatchesALeak builds the storefront with the test-only leak (-tags leaktest: one
// goroutine kept per purchase) and soaks it through -bin: the goroutines of the instances are
// judged LEAK, and the run, whose invariants held, exits ExitLeak. Without the kill kind
// (-mix-skip kill), every instance lives the whole run, so its series is long enough to judge
// however early a kill would have come (one at 0.5 s left a CI run with no series judged), and
// two samples a second after a 2 s warm-up give an 8 s run enough points to judge.
func TestSoakCatchesALeak(t *testing.T) {
	testkit.NeedStorefront(t)
	testkit.NeedClock(t)
	bin, err := storefrontbin.Shared(context.Background(), filepath.Join("..", ".."), t.TempDir(), "leaktest") // STOCKGUARD_BIN_LEAKTEST when make test built it
	require.NoError(t, err)

	cfg, err := scenario.ParseConfig(soakArgs(bin, "-mix-skip", "kill", "-soak-every", "500ms", "-soak-warmup", "2s"), io.Discard)
	require.NoError(t, err)
	rep, err := scenario.Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log(table.String())
	require.NotNil(t, rep.Soak)
	require.NotEmpty(t, rep.Leaked, "the leaking storefront was not caught")
	var goroutines []soak.Fit
	for _, f := range rep.Soak.Leaks() {
		if f.Metric == soak.Goroutines.Name {
			goroutines = append(goroutines, f)
		}
	}
	require.NotEmpty(t, goroutines, "LEAK, but not of goroutines: %v", rep.Leaked)
	for _, f := range goroutines {
		assert.Greater(t, f.Growth, f.Bound, f.Series)
		assert.Greater(t, f.Shift, f.Bound/2, f.Series)
	}
	for _, s := range rep.Strategies {
		assert.Equal(t, verdict.Safe, s.Verdict, "the leak leaves the invariants alone: %v", s.Violations)
	}
	assert.Empty(t, rep.Failed)
	assert.Equal(t, report.ExitLeak, rep.ExitCode)
	assert.Contains(t, table.String(), "soak verdict: LEAK (goroutines of i")
}

// TestSoakOfEveryWorkloadIsNoLeak is the short soak of CI: guard runs purchases, carts and
// holds in turn under the fault schedule, every kind of which fires in each run (a kind that
// did not, or a kind that broke carts or holds, would fail the run: exit 1); every run is SAFE
// with a linearizable history, no series is a LEAK, and the HTML report plots them.
func TestSoakOfEveryWorkloadIsNoLeak(t *testing.T) {
	testkit.NeedStorefront(t)
	testkit.NeedClock(t)
	html := filepath.Join(t.TempDir(), "soak.html")
	cfg, err := scenario.ParseConfig(soakArgs(testkit.Storefront, "-workload", "purchase,cart,holds", "-html", html), io.Discard)
	require.NoError(t, err)
	rep, err := scenario.Run(context.Background(), cfg, testkit.Tlog{T: t})
	require.NoError(t, err)
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log(table.String())
	require.Len(t, rep.Strategies, 3)
	for i, wl := range []string{config.WorkloadPurchase, config.WorkloadCart, config.WorkloadHolds} {
		s := rep.Strategies[i]
		assert.Equal(t, wl, s.Workload)
		assert.Equal(t, "guard ["+wl+"]", s.Label())
		assert.Equal(t, verdict.Safe, s.Verdict, "%s: %v", wl, s.Violations)
		require.NotNil(t, s.Chaos, wl)
		require.NotNil(t, s.Chaos.Mix, wl)
		assert.True(t, s.Chaos.Mix.Complete(), "%s: every kind fired: %s", wl, s.Chaos)
		require.NotNil(t, s.History, wl)
		assert.Equal(t, checks.Linearizable, s.History.Verdict, "%s: %s", wl, s.History.Reason)
		if wl != config.WorkloadPurchase {
			require.NotNil(t, s.Carts, wl)
			assert.Positive(t, s.Carts.Checkouts, wl)
		}
	}
	require.NotNil(t, rep.Soak)
	assert.Empty(t, rep.Leaked, "a normal storefront judged LEAK")
	assert.Equal(t, 0, rep.ExitCode, rep.Failed)
	judged := map[string]bool{}
	for _, f := range rep.Soak.Fits {
		if f.Short == "" {
			judged[f.Metric] = true
		}
	}
	for _, m := range append(slices.Clone(soak.StorefrontMetrics), soak.RedisMetrics...) {
		assert.True(t, judged[m.Name], "%s: a series judged", m.Name)
	}
	assert.Contains(t, table.String(), "soak verdict: no leak")
	require.NoError(t, rep.WriteHTML(html))
	page, err := os.ReadFile(html)
	require.NoError(t, err)
	assert.Contains(t, string(page), `<svg class="soak"`)
	assert.Contains(t, string(page), "soak verdict: no leak")
	assert.Equal(t, fault.ChaosMix, rep.Config.Chaos)
	assert.Empty(t, testkit.Children(t))
}
