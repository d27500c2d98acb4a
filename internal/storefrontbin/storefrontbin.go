// Package storefrontbin builds the storefront binary (the module's root package) for the
// tests that run it as a process, or hands them the one `make test` built for the whole run.
//
// `make test` builds the storefront once per build variant before `go test` and names each
// file in an environment variable (EnvVar): STOCKGUARD_BIN for the default build,
// STOCKGUARD_BIN_LEAKTEST for `-tags leaktest`, STOCKGUARD_BIN_NODEMO for `-tags nodemo`. A
// test run without them (a plain `go test ./lab`) builds its own, as before.
package storefrontbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvVar returns the name of the environment variable that names a prebuilt storefront with
// the build tags: STOCKGUARD_BIN, followed by _TAG (upper case) for each tag in order.
func EnvVar(tags ...string) string {
	name := "STOCKGUARD_BIN"
	for _, tag := range tags {
		name += "_" + strings.ToUpper(tag)
	}
	return name
}

// Shared returns the storefront built with tags: the file EnvVar(tags...) names when that
// variable is set (an error when it is not an executable file: a stale variable must not pass
// for a build), else a new build of the module at root into dir (Build).
func Shared(ctx context.Context, root, dir string, tags ...string) (string, error) {
	if bin := os.Getenv(EnvVar(tags...)); bin != "" {
		st, err := os.Stat(bin)
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvVar(tags...), err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s: not an executable file", EnvVar(tags...), bin)
		}
		return bin, nil
	}
	return Build(ctx, root, dir, tags...)
}

// Build runs `go build [-tags tags] -o dir/stockguard .` in root (the module's directory) and
// returns the binary's path; the error carries go build's output.
func Build(ctx context.Context, root, dir string, tags ...string) (string, error) {
	if _, err := os.Stat(filepath.Join(root, "main.go")); err != nil {
		return "", fmt.Errorf("no storefront main.go in %s", root)
	}
	bin := filepath.Join(dir, "stockguard")
	if len(tags) > 0 {
		bin += "-" + strings.Join(tags, "-")
	}
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", bin, ".")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}
