// Command loadtest proves, across several storefront processes, which purchase strategies
// oversell. By default it builds the storefront, starts three instances sharing one SQLite file
// (-db postgres: a private PostgreSQL server) and one Redis, and for each strategy resets the
// catalogue, fires purchases, and checks every invariant of docs/DESIGN.md §12 from the servers'
// API and its own record of the answers.
//
//	go run ./loadtest                              # the comparison of the strategies offered outside demo mode
//	go run ./loadtest -chaos pause                 # pause the lock holder past its lease
//	go run ./loadtest -db postgres                 # the instances share a private PostgreSQL
//	go run ./loadtest -db postgres://u:p@127.0.0.1:5432/shop   # ... or an existing one
//	go run ./loadtest -chaos failover              # Sentinel failover that loses the hot lock
//	go run ./loadtest -chaos partition             # black-hole the lock holder's link to Redis
//	go run ./loadtest -chaos latency               # each strategy with and without 20ms each way
//	go run ./loadtest -chaos clock                 # step Redis's clock past the lease while the holder works
//	go run ./loadtest -chaos mix -duration 60s     # a fault every few seconds, drawn from all of them
//	go run ./loadtest -chaos mix -soak -workload purchase,cart,holds   # ... and is anything leaking?
//	go run ./loadtest -rate 400 -spike -threshold 'p99<500ms,errors<1%'   # a flash sale, open model
//	go run ./loadtest -target http://127.0.0.1:8080 -admin-token secret
//	go run ./loadtest -json report.json -html report.html
//	go run ./loadtest -scenario pitfalls           # every broken lock next to its fix
//	go run ./loadtest -perf                        # same-run req/s, p50/p99 and ratios (make perf)
//
// Exit status: 0 when every strategy expected SAFE kept the invariants (the expectation follows
// from what GET /api/strategies says of the strategy and from the chaos mode, fault/modes.go), 1 when
// one broke them or answered in a history found NOT linearizable (checks/history.go), 2 on bad flags,
// unreachable targets or another error, 3 when every invariant held but a -threshold was missed
// (config/threshold.go, report/thresholds.go), 4 when every invariant held but a -soak series
// grew past its bound (a LEAK, loadtest/soak; it wins over a missed threshold), 130 when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/stockguard/stockguard/loadtest/config"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/scenario"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Main runs the load test with command-line args and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := scenario.ParseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	var logw io.Writer = stderr
	if cfg.Scenario == "pitfalls" {
		return mainPitfalls(ctx, cfg, stdout, stderr)
	}
	if cfg.Perf {
		return mainPerf(ctx, cfg, stdout, stderr)
	}
	rep, err := scenario.Run(ctx, cfg, logw)
	if err != nil {
		return failed(ctx, stderr, "loadtest:", err)
	}
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	if code := writeReport(cfg.JSONFile, stderr, rep.WriteJSON); code != 0 {
		return code
	}
	if cfg.HTMLFile != "" {
		if err := rep.WriteHTML(cfg.HTMLFile); err != nil {
			fmt.Fprintln(stderr, "loadtest: write HTML report:", err)
			return 2
		}
	}
	if rep.ExitCode == report.ExitThreshold {
		fmt.Fprintln(stderr, "loadtest: FAIL: a -threshold was missed (every invariant held)")
	}
	if len(rep.Leaked) > 0 {
		fmt.Fprintf(stderr, "loadtest: FAIL: LEAK: each of %v grew past its bound over the soak\n", rep.Leaked)
	}
	if rep.ExitCode == 1 {
		fmt.Fprintf(stderr, "loadtest: FAIL: %v broke an invariant or answered in a NOT linearizable history although expected SAFE in this setting\n", rep.Failed)
	}
	return rep.ExitCode
}

// mainPerf runs -perf and prints its table (and writes -json).
func mainPerf(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) int {
	rep, err := scenario.RunPerf(ctx, cfg, stderr)
	if err != nil {
		return failed(ctx, stderr, "loadtest -perf:", err)
	}
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	return writeReport(cfg.JSONFile, stderr, rep.WriteJSON)
}

// failed reports a run that could not be carried out: 130 when interrupted (every process it
// started is stopped by then), else 2.
func failed(ctx context.Context, stderr io.Writer, prefix string, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "loadtest: interrupted; every process it started is stopped")
		return 130
	}
	fmt.Fprintln(stderr, prefix, oneLine(err.Error()))
	return 2
}

// writeReport writes the -json report with write when a file was asked for: 0, or 2 on error.
func writeReport(file string, stderr io.Writer, write func(string) error) int {
	if file == "" {
		return 0
	}
	if err := write(file); err != nil {
		fmt.Fprintln(stderr, "loadtest: write JSON report:", err)
		return 2
	}
	return 0
}

func oneLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// mainPitfalls runs -scenario pitfalls: exit 1 when a pitfall did not show its failure or a fix
// broke an invariant.
func mainPitfalls(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) int {
	redis.SetLogger(scenario.QuietRedis{})
	rows, err := scenario.RunPitfalls(ctx, cfg, stderr)
	if err != nil {
		return failed(ctx, stderr, "loadtest: pitfalls:", err)
	}
	fmt.Fprintln(stdout)
	code := report.WritePitfalls(stdout, rows)
	if c := writeReport(cfg.JSONFile, stderr, func(file string) error {
		return report.WritePitfallsJSON(file, cfg.DB, scenario.PitfallLease, scenario.PitfallWait, rows, code)
	}); c != 0 {
		return c
	}
	if code != 0 {
		fmt.Fprintln(stderr, "loadtest: FAIL: a pitfall did not show its failure, or a fix broke an invariant (rows marked UNEXPECTED)")
	}
	return code
}
