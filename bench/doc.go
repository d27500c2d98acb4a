// Package bench compares the stockguard lock (package locking) with the Go locks a developer
// would pick instead, bsm/redislock and go-redsync/redsync, against real redis-server
// processes started by the benchmarks themselves.
//
// It is a nested module so that the peer libraries never enter the main module's
// dependencies. Run it from the repository root with `make bench`, or here:
//
//	go test -run '^$' -bench . -benchtime 3s .   # the benchmarks (~1.5 min on 2 vCPUs)
//	go test .                                     # quick sanity test (~1 s): each adapter excludes
//
// Workloads (see bench_test.go): uncontended Obtain+Release next to a PING round trip; 32
// goroutines on one key holding it 1ms and pausing 1ms outside it (a release is a handoff);
// the same with no hold and no pause (raw throughput). Contended benchmarks report
// sections/s, the wait before entry (p50, p99), the idle gap between one holder's release and
// the next holder's entry (p50), Redis commands per section from INFO stats (commands run
// inside Lua scripts included, as Redis counts them), the redis-servers' CPU time per section
// (INFO cpu) and client calls (round trips) per section. The uncontended benchmark also
// splits an op's time: round trips, time outside Redis calls (the library's own work) and
// redis-server CPU time.
//
// `go run ./benchtable < results.txt` turns the output into the Markdown tables of README.
package bench
