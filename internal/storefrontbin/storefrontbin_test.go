package storefrontbin

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEnvVar(t *testing.T) {
	for tags, want := range map[string]string{"": "STOCKGUARD_BIN", "leaktest": "STOCKGUARD_BIN_LEAKTEST", "nodemo": "STOCKGUARD_BIN_NODEMO"} {
		var args []string
		if tags != "" {
			args = []string{tags}
		}
		if got := EnvVar(args...); got != want {
			t.Errorf("EnvVar(%q) = %s, want %s", tags, got, want)
		}
	}
}

// Shared takes the file the variable names, without building; a variable naming no executable
// file is an error, not a build.
func TestSharedTakesTheVariablesFile(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prebuilt")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STOCKGUARD_BIN_LEAKTEST", bin)
	got, err := Shared(t.Context(), "no-such-root", dir, "leaktest")
	if err != nil || got != bin {
		t.Fatalf("Shared = %q, %v; want %q", got, err, bin)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), dir} {
		t.Setenv("STOCKGUARD_BIN_LEAKTEST", bad)
		if got, err := Shared(t.Context(), "no-such-root", dir, "leaktest"); err == nil {
			t.Errorf("STOCKGUARD_BIN_LEAKTEST=%s: Shared = %q, want an error", bad, got)
		}
	}
	t.Setenv("STOCKGUARD_BIN_LEAKTEST", "")
	if _, err := Shared(t.Context(), "no-such-root", dir, "leaktest"); err == nil {
		t.Error("unset, Shared built in a directory without main.go")
	}
}
