//go:build !simmutation

package sim

// setReuseTriedToken: the mutation is compiled in with -tags simmutation only.
func setReuseTriedToken(bool) bool { return false }
