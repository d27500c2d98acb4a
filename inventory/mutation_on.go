//go:build simmutation

package inventory

import "sync/atomic"

// MutateReuseTriedToken, in a build with the simmutation tag only (the simulator's mutation
// runs, package sim), makes a streaming hold write again under a token whose transaction ran:
// the fault the spent token exists for. Never in a storefront build.
var MutateReuseTriedToken atomic.Bool

func reuseTriedToken() bool { return MutateReuseTriedToken.Load() }
