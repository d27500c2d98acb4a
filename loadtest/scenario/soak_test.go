package scenario

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/fault"
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
