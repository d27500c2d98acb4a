package bench

import (
	"github.com/stockguard/stockguard/locking"
)

// The lock family of package locking (issue 6), each under the 32-way handoff workload next
// to the core lock and to redsync over the same nodes. A kind is listed here once it exists
// in package locking.
func init() {
	familyKinds = append(familyKinds,
		kind{name: "stockguard", nodes: 1, open: openStockguard(nil)},
		kind{name: "spin", nodes: 1, open: openStockguard(func(o *locking.Options) {
			o.Spin = &locking.SpinOptions{} // the defaults: 2ms doubling to 50ms, jittered
		})},
	)
}
