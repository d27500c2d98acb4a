// Package inventory is the purchase use-case of the storefront: the selling strategies, the
// database guard, idempotency and the catalogue queries. It knows nothing of HTTP.
//
// The built-in strategies are the rows of StrategyTable: naive, local, lock, guard, lock+guard
// and redlock+guard. Every guarded write, of one purchase as of a coalesced lock hold's batch,
// is one transaction of the same code (the guarded update, fenced by the lock's token for
// lock+guard, then the orders); a refused write has one explanation (stale fence, short stock,
// item gone).
//
// Two seams let code outside the purchase path plug in without the path naming it:
//
//   - Config.Extra adds strategy rows after the built-in ones. The demo strategies (the
//     broken locks and the lockless alternatives, DemoStrategies) are such rows, in the
//     demo_*.go files, which a build with the nodemo tag leaves out. A row whose state lives
//     outside the database names a Resetter, which Service.Reset calls.
//   - An Interceptor, put in a purchase's context with WithInterceptor, chooses the lock
//     service of that one purchase and stands just before its write: tests and the lab's
//     fault injection act on one purchase through it, and such a purchase takes a lock hold
//     of its own.
package inventory
