// Command testtime runs `go test -json` for make test and reads its events: it prints go test's
// usual output (each package's `ok` or `FAIL` line included) and keeps the events in a file;
// at the end of the run it prints the slowest tests and fails the run past its time budget.
//
//	testtime run -json FILE -- go test -json ...   run go test; its text to stdout, its events appended to FILE; exit with its status
//	testtime summary -start FILE -budget 15m [-n 15] FILE.json ...
//	                                                 the n slowest tests and each package's time; exit 1 past the budget since start
//
// No pipe between go test and testtime: run waits for go test itself, so its exit status is
// the run's (a shell pipe would report only the last command's).
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testtime run -json FILE -- go test -json ... | testtime summary -start FILE -budget D [-n N] FILE.json ...")
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "run":
		code = run(os.Args[2:], os.Stdout, os.Stderr)
	case "summary":
		code = summary(os.Args[2:], time.Now(), os.Stdout, os.Stderr)
	default:
		fmt.Fprintf(os.Stderr, "testtime: unknown command %q (run, summary)\n", os.Args[1])
		code = 2
	}
	os.Exit(code)
}

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64 // seconds
	Output  string
}

// run starts the command after "--", copies the text of its events (the Output fields: what
// go test prints without -json) to stdout and its lines to the file, and returns its exit
// status. A line that is not an event (go test's own messages) is printed as it is.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testtime run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("json", "", "append go test's events to this `file`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cmdline := fs.Args()
	if *file == "" || len(cmdline) == 0 {
		fmt.Fprintln(stderr, "testtime run: need -json FILE and a command after --")
		return 2
	}
	out, err := os.OpenFile(*file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(stderr, "testtime run:", err)
		return 2
	}
	defer out.Close()
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testtime run:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testtime run:", err)
		return 2
	}
	copyErr := relay(pipe, stdout, out)
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(stderr, "testtime run:", err)
		return 2
	case copyErr != nil:
		fmt.Fprintln(stderr, "testtime run: keeping the events:", copyErr)
		return 2
	}
	return 0
}

// relay copies each line of r to keep, and to text what go test prints without -json and -v:
// a test's output only when it fails (with its subtests'), a package's own lines (its `ok` or
// `FAIL` line, a panic, a build error) always, and a line that is not an event as it is. It
// reads r to its end even when keep fails, so the command is never blocked on a full pipe; it
// returns keep's first error.
func relay(r io.Reader, text, keep io.Writer) error {
	var keepErr error
	held := map[string][]string{} // package + " " + test -> its output until it ends
	flush := func(pkg, prefix string) {
		var keys []string
		for k := range held {
			if k == pkg+" "+prefix || strings.HasPrefix(k, pkg+" "+prefix+"/") || prefix == "" && strings.HasPrefix(k, pkg+" ") {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, o := range held[k] {
				_, _ = io.WriteString(text, o)
			}
			delete(held, k)
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if keepErr == nil {
			_, keepErr = keep.Write(append(line, '\n'))
		}
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			_, _ = text.Write(append(line, '\n'))
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Test == "" && e.Action == "fail": // the package failed: what its unfinished tests said too
			flush(e.Package, "")
		case e.Test == "" && e.Output != "" && e.Output != "PASS\n":
			_, _ = io.WriteString(text, e.Output)
		case e.Test == "":
		case e.Action == "output":
			held[key] = append(held[key], e.Output)
		case e.Action == "fail":
			flush(e.Package, e.Test)
		case e.Action == "pass" || e.Action == "skip":
			delete(held, key)
		}
	}
	if err := sc.Err(); err != nil && keepErr == nil {
		keepErr = err
	}
	return keepErr
}

// timing is a test's or a package's time in one pass.
type timing struct {
	name    string // "pkg TestName" or "pkg"
	action  string // pass, fail, skip
	elapsed time.Duration
}

// summary prints the n slowest top-level tests and the packages by time, read from the event
// files, then the run's time since the start file's Unix seconds; past the budget it names the
// slowest tests and returns 1.
func summary(args []string, now time.Time, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testtime summary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	start := fs.String("start", "", "a `file` holding the run's start in Unix seconds (date +%s)")
	budget := fs.Duration("budget", 15*time.Minute, "fail the run past this wall time since -start")
	n := fs.Int("n", 15, "print this many of the slowest tests")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var tests, pkgs []timing
	for _, f := range fs.Args() {
		t, p, err := readTimings(f)
		if errors.Is(err, os.ErrNotExist) { // a pass that did not run (an earlier step failed)
			continue
		}
		if err != nil {
			fmt.Fprintln(stderr, "testtime summary:", err)
			return 2
		}
		tests, pkgs = append(tests, t...), append(pkgs, p...)
	}
	slowest := func(ts []timing) {
		slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
	}
	slowest(tests)
	slowest(pkgs)
	top := tests[:min(*n, len(tests))]
	fmt.Fprintf(stdout, "\nthe %d slowest tests (of %d):\n", len(top), len(tests))
	writeTimings(stdout, top)
	fmt.Fprintf(stdout, "\nthe packages by time (each pass; packages run in parallel, so they add up to more than the run):\n")
	writeTimings(stdout, pkgs[:min(10, len(pkgs))])
	if *start == "" {
		return 0
	}
	b, err := os.ReadFile(*start)
	if err != nil {
		fmt.Fprintln(stderr, "testtime summary:", err)
		return 2
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "testtime summary: %s: not Unix seconds: %v\n", *start, err)
		return 2
	}
	took := now.Sub(time.Unix(sec, 0)).Round(time.Second)
	if took > *budget {
		fmt.Fprintf(stdout, "\nFAIL: the run took %s, past its budget of %s (docs/architecture.md#tests); the slowest tests:\n", took, *budget)
		writeTimings(stdout, tests[:min(5, len(tests))])
		return 1
	}
	fmt.Fprintf(stdout, "\nthe run took %s (budget %s)\n", took, *budget)
	return 0
}

// readTimings reads a file of go test events: the top-level tests' and the packages' times
// (their pass, fail or skip events; subtests are inside their parent's time).
func readTimings(file string) (tests, pkgs []timing, err error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		d := time.Duration(e.Elapsed * float64(time.Second))
		switch {
		case e.Test == "":
			pkgs = append(pkgs, timing{name: e.Package, action: e.Action, elapsed: d})
		case !strings.Contains(e.Test, "/"):
			tests = append(tests, timing{name: e.Package + " " + e.Test, action: e.Action, elapsed: d})
		}
	}
	return tests, pkgs, sc.Err()
}

func writeTimings(w io.Writer, ts []timing) {
	for _, t := range ts {
		fmt.Fprintf(w, "  %8.1fs  %-4s  %s\n", t.elapsed.Seconds(), t.action, t.name)
	}
}
