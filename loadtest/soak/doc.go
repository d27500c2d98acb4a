// Package soak finds slow leaks: it samples what every storefront of a run carries (goroutines,
// heap, RSS, open file descriptors, database connections in use, overdue holds) and what the
// shared Redis carries (connected clients, keys and pub/sub channels under the storefronts'
// prefix) every few seconds, and fits each series after a warm-up. A series that grows with time
// beyond its bound is a LEAK.
//
// The fit is Theil–Sen (the median of the slopes between every pair of points), not least
// squares: a fault makes spikes (a paused instance's goroutines pile up, a Redis restart drops
// every client), and a median slope ignores a few spikes where a least-squares line follows them.
// A series is a LEAK when both
//   - its fitted growth over the judged window (slope × window) passes the metric's bound, and
//   - the median of its last quarter stands above the median of its first quarter by at least
//     half that bound, so that a rise that fell back before the end (a backlog that drained
//     once its fault was undone) is not taken for a trend.
//
// A restarted storefront is a new process: its series starts again (the series key carries the
// process's start time), so a restart is never read as memory given back or taken.
//
// The package imports nothing of the load test: it is given the targets' URLs and a Redis
// client, and answers samples, series and verdicts; the report draws them.
package soak
