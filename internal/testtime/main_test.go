package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const events = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (2.50s)\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":2.5}
{"Action":"output","Package":"p","Test":"TestB/sub","Output":"    sub failed\n"}
{"Action":"fail","Package":"p","Test":"TestB/sub","Elapsed":9}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- FAIL: TestB (9.50s)\n"}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":9.5}
{"Action":"output","Package":"p","Output":"FAIL\tp\t12.0s\n"}
{"Action":"fail","Package":"p","Elapsed":12}
`

// relay prints what go test prints without -json: a passing test's output not, a failing
// one's (its subtests' too) and the package's closing FAIL line yes; it keeps every line, and
// passes a line that is not an event through as it is.
func TestRelay(t *testing.T) {
	var text, keep bytes.Buffer
	in := events + "go: downloading x\n"
	if err := relay(strings.NewReader(in), &text, &keep); err != nil {
		t.Fatal(err)
	}
	want := "    sub failed\n--- FAIL: TestB (9.50s)\nFAIL\tp\t12.0s\ngo: downloading x\n"
	if text.String() != want {
		t.Errorf("text:\n%q\nwant\n%q", text.String(), want)
	}
	if keep.String() != in {
		t.Errorf("kept %q, want the input", keep.String())
	}
}

// run exits with the command's status.
func TestRunKeepsTheExitStatus(t *testing.T) {
	file := filepath.Join(t.TempDir(), "e.json")
	var out, errs bytes.Buffer
	if code := run([]string{"-json", file, "--", "sh", "-c", "printf '%s\\n' '{\"Action\":\"output\",\"Output\":\"FAIL\\n\"}'; exit 3"}, &out, &errs); code != 3 {
		t.Errorf("exit %d, want 3 (%s)", code, errs.String())
	}
	if out.String() != "FAIL\n" {
		t.Errorf("text %q", out.String())
	}
}

// summary lists the top-level tests slowest first, and fails past the budget naming them.
func TestSummary(t *testing.T) {
	dir := t.TempDir()
	file, start := filepath.Join(dir, "e.json"), filepath.Join(dir, "start")
	now := time.Unix(1_000_000, 0)
	if err := os.WriteFile(file, []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(start, []byte(strconv.FormatInt(now.Add(-10*time.Minute).Unix(), 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := summary([]string{"-start", start, "-budget", "15m", file}, now, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errs.String())
	}
	s := out.String()
	if i, j := strings.Index(s, "p TestB"), strings.Index(s, "p TestA"); i < 0 || j < 0 || i > j || strings.Contains(s, "TestB/sub") {
		t.Errorf("want TestB before TestA and no subtest:\n%s", s)
	}
	if !strings.Contains(s, "the run took 10m0s (budget 15m0s)") {
		t.Errorf("no run time:\n%s", s)
	}
	out.Reset()
	if code := summary([]string{"-start", start, "-budget", "5m", file}, now, &out, &errs); code != 1 {
		t.Fatalf("exit %d past the budget, want 1", code)
	}
	if !strings.Contains(out.String(), "past its budget of 5m0s") || !strings.Contains(out.String()[strings.Index(out.String(), "past its"):], "p TestB") {
		t.Errorf("the failure names no slow test:\n%s", out.String())
	}
}
