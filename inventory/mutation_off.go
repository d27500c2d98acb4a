//go:build !simmutation

package inventory

// reuseTriedToken is false outside the simulator's mutation runs (mutation_on.go): a constant
// the compiler folds away.
func reuseTriedToken() bool { return false }
