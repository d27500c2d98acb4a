// Command benchtable turns the output of the bench module's benchmarks (`go test -bench`,
// any -count) into Markdown tables: the median of each metric over the runs, with the
// spread (min-max) of the headline metric, and the core lock's goals against its peers checked.
//
//	go test -run '^$' -bench . -benchtime 3s -count 3 . | tee results.txt
//	go run ./benchtable < results.txt > table.md
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is every value of every metric of one benchmark, over the runs.
type result struct {
	name    string
	metrics map[string][]float64
}

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader) ([]*result, map[string]string) {
	var (
		order  []*result
		byName = map[string]*result{}
		conf   = map[string]string{}
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "Benchmark") && !strings.Contains(k, " ") {
			conf[k] = v
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		res := byName[name]
		if res == nil {
			res = &result{name: name, metrics: map[string][]float64{}}
			byName[name] = res
			order = append(order, res)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.metrics[f[i+1]] = append(res.metrics[f[i+1]], v)
		}
	}
	return order, conf
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *result) med(unit string) float64 { return median(r.metrics[unit]) }

func (r *result) spread(unit string, format func(float64) string) string {
	v := r.metrics[unit]
	if len(v) < 2 {
		return format(median(v))
	}
	return fmt.Sprintf("%s (%s–%s)", format(median(v)), format(slices.Min(v)), format(slices.Max(v)))
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func group(all []*result, prefix string) []*result {
	var out []*result
	for _, r := range all {
		if strings.HasPrefix(r.name, prefix+"/") {
			out = append(out, r)
		}
	}
	return out
}

func find(rs []*result, name string) *result {
	for _, r := range rs {
		if strings.HasSuffix(r.name, "/"+name) {
			return r
		}
	}
	return nil
}

func sub(r *result) string { _, s, _ := strings.Cut(r.name, "/"); return s }

func main() {
	all, conf := parse(os.Stdin)
	w := os.Stdout
	runs := 0
	for _, r := range all {
		runs = max(runs, len(r.metrics["ns/op"]), len(r.metrics["sections/s"]))
	}
	fmt.Fprintf(w, "Medians of %d runs (min–max in brackets); cpu: %s.\n\n", runs, conf["cpu"])

	unc := group(all, "Uncontended")
	ping := find(unc, "ping")
	if len(unc) > 0 {
		fmt.Fprintf(w, "### Uncontended Obtain+Release\n\n")
		fmt.Fprintf(w, "| lock | µs/op | × PING | round trips/op | library µs/op | Redis exec µs/op | Redis CPU µs/op | allocs/op | B/op |\n")
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range unc {
			x := ""
			if ping != nil && ping.med("ns/op") > 0 {
				x = fmt.Sprintf("%.2f", r.med("ns/op")/ping.med("ns/op"))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sub(r),
				r.spread("ns/op", func(v float64) string { return num(v / 1000) }), x,
				num(r.med("calls/op")), num(r.med("lib-µs/op")), num(r.med("redis-exec-µs/op")),
				num(r.med("redis-cpu-µs/op")),
				num(r.med("allocs/op")), num(r.med("B/op")))
		}
		fmt.Fprintln(w)
	}
	for _, g := range []struct{ prefix, title string }{
		{"Handoff32", "Handoff: 32 goroutines, hold 1 ms, pause 1 ms"},
		{"Raw32", "Raw throughput: 32 goroutines, no hold, no pause"},
		{"FamilyHandoff32", "Lock family, handoff: 32 goroutines, hold 1 ms, pause 1 ms"},
	} {
		rs := group(all, g.prefix)
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(w, "### %s\n\n", g.title)
		fmt.Fprintf(w, "| lock | sections/s | wait p50 ms | wait p99 ms | handoff p50 ms | handoff p99 ms | Redis cmds/section | Redis CPU µs/section | round trips/section |\n")
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rs {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sub(r),
				r.spread("sections/s", num), num(r.med("p50-wait-ms")), r.spread("p99-wait-ms", num),
				num(r.med("p50-handoff-ms")), num(r.med("p99-handoff-ms")), num(r.med("redis-cmds/section")),
				num(r.med("redis-cpu-µs/section")), num(r.med("calls/section")))
		}
		fmt.Fprintln(w)
	}
	targets(w, all)
}

// targets checks, on the medians, the goals the core lock was built to meet against its
// peers: as fast as the leanest one uncontended, and a far better handoff under contention.
func targets(w io.Writer, all []*result) {
	fmt.Fprintf(w, "### Targets: the core lock against its peers\n\n")
	unc := group(all, "Uncontended")
	if ours := find(unc, "stockguard"); ours != nil {
		best := bestOf(unc, "ns/op", false, "redislock", "redsync")
		if best != nil {
			ratio := ours.med("ns/op") / best.med("ns/op")
			fmt.Fprintf(w, "- Uncontended within 1.1× of the leanest peer (%s): %.2f× — %s\n",
				sub(best), ratio, verdict(ratio <= 1.1))
		}
	}
	hand := group(all, "Handoff32")
	if ours := find(hand, "stockguard"); ours != nil {
		best := bestOf(hand, "sections/s", true, "redislock-1ms", "redislock-10ms", "redsync")
		if best != nil {
			r1 := ours.med("sections/s") / best.med("sections/s")
			r2 := ours.med("p99-wait-ms") / best.med("p99-wait-ms")
			fmt.Fprintf(w, "- Handoff sections/s ≥ 1.3× the better peer (%s): %.2f× — %s\n", sub(best), r1, verdict(r1 >= 1.3))
			fmt.Fprintf(w, "- Handoff p99 wait ≤ 1/10 of that peer's: %.2f of it — %s\n", r2, verdict(r2 <= 0.1))
		}
	}
	fmt.Fprintln(w)
}

func bestOf(rs []*result, unit string, higher bool, names ...string) *result {
	var best *result
	for _, n := range names {
		r := find(rs, n)
		if r == nil {
			continue
		}
		if best == nil || (higher && r.med(unit) > best.med(unit)) || (!higher && r.med(unit) < best.med(unit)) {
			best = r
		}
	}
	return best
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}
