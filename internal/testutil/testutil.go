// Package testutil holds what the tests of every package share that is no server: the groups
// of tests `go test -short` (make test-short, the inner loop) leaves out.
package testutil

import "testing"

// The groups of tests -short skips; make test runs them all.
const (
	MultiProcess = "multi-process" // several OS processes: storefront binaries, Redis Cluster or Sentinel, nginx
	Fault        = "fault"         // a fault on a real server: a stopped, paused or cut-off Redis or PostgreSQL, a hung node
	Browser      = "browser"       // a headless Chromium
	Build        = "build"         // a go build of the storefront (tens of seconds; make test builds it once for every test)
	Postgres     = "postgres"      // the PostgreSQL rows of a table that runs on both backends (SQLite still runs), and the PostgreSQL-only tests
	Mutation     = "mutation"      // the simulator's mutation runs: seeds until each planted fault is found, 5 to 20 s on two cores as the interleavings fall
)

// SkipShort skips tb under -short, naming its group (MultiProcess, Fault, Browser, Build, Postgres, Mutation)
// in the message: `make test` runs it.
func SkipShort(tb testing.TB, group string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("-short skips the %s tests (make test runs them)", group)
	}
}
