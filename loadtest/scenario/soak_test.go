package scenario

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/checks"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stockguard/stockguard/loadtest/internal/testkit"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/soak"
)

// TestSoakConfig: -soak runs under -chaos mix only, its flags are checked, and -workload takes
// a list there (each workload once).
func TestSoakConfig(t *testing.T) {
	c, err := ParseConfig([]string{"-chaos", "mix", "-soak", "-workload", "purchase, cart,holds", "-strategies", "guard,lock+guard"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, c.Soak)
	assert.Equal(t, 2*time.Second, c.SoakEvery)
	assert.Equal(t, 20*time.Second, c.SoakWarmup)
	assert.Equal(t, []string{config.WorkloadPurchase, config.WorkloadCart, config.WorkloadHolds}, c.Workloads)
	assert.Equal(t, config.WorkloadPurchase, c.Workload, "the first workload")
	c, err = ParseConfig([]string{"-chaos", "mix", "-soak", "-mix-skip", "kill,postgres-restart"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"kill", "postgres-restart"}, c.MixSkip)
	for _, wl := range []string{"cart", "holds"} {
		_, err = ParseConfig([]string{"-chaos", "mix", "-workload", wl}, io.Discard)
		assert.NoError(t, err, "-chaos mix takes -workload %s", wl)
	}
	for args, want := range map[string]string{
		"-soak":                                                       "-soak runs under -chaos mix (the fault schedule is what it soaks the storefronts in)",
		"-soak -chaos pause":                                          "-soak runs under -chaos mix (the fault schedule is what it soaks the storefronts in)",
		"-chaos mix -soak-every 1s":                                   "-soak-every applies to -soak",
		"-chaos mix -soak -soak-every 10ms":                           "-soak-every must be 200ms..1m, got 10ms",
		"-chaos mix -soak -soak-warmup 0s":                            "-soak-warmup must be 1s..10m, got 0s",
		"-workload purchase,cart":                                     "-workload: a list of workloads (purchase,cart) runs under -chaos mix only",
		"-chaos mix -workload cart,cart":                              "-workload cart given twice",
		"-chaos mix -workload purchase,crate":                         `-workload must be "purchase", "cart" or "holds", got "crate"`,
		"-chaos mix -workload ,":                                      "-workload is empty",
		"-chaos mix -workload purchase,cart -strategies lock":         `-workload cart: strategy "lock" sells no carts (the cart strategies: naive, guard, lock+guard)`,
		"-mix-skip kill":                                              "-mix-skip applies to -chaos mix only",
		"-chaos mix -mix-skip kil":                                    "-mix-skip: the fault kinds of -chaos mix are " + strings.Join(fault.MixKinds(), ", ") + ", got kil",
		"-chaos mix -mix-skip " + strings.Join(fault.MixKinds(), ","): "-mix-skip leaves no fault kind to -chaos mix (with -db sqlite: " + strings.Join(fault.MixKindsOffered(false), ", ") + ")",
		// On SQLite the PostgreSQL restart is no kind of the schedule: skipping every other leaves none.
		"-chaos mix -mix-skip " + strings.Join(fault.MixKindsOffered(false), ","): "-mix-skip leaves no fault kind to -chaos mix (with -db sqlite: " + strings.Join(fault.MixKindsOffered(false), ", ") + ")",
	} {
		_, err := ParseConfig(strings.Fields(args), io.Discard)
		var ue *usageError
		if assert.ErrorAs(t, err, &ue, args) {
			assert.Equal(t, want, err.Error(), args)
		}
	}
}

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

	cfg, err := ParseConfig(soakArgs(bin, "-mix-skip", "kill", "-soak-every", "500ms", "-soak-warmup", "2s"), io.Discard)
	require.NoError(t, err)
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
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
	cfg, err := ParseConfig(soakArgs(testkit.Storefront, "-workload", "purchase,cart,holds", "-html", html), io.Discard)
	require.NoError(t, err)
	rep, err := Run(context.Background(), cfg, testkit.Tlog{T: t})
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
