package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/testutil"
)

const module = "github.com/stockguard/stockguard"

// TestDependencyPicture keeps the imports between the project's packages as docs/DESIGN.md §2.2
// draws them: main wires everything; handlers imports only inventory; inventory imports locking
// and models; locking and models import no package of the project; pitfalls (the demo's broken
// locks) plugs into inventory only; the lab sits on top of the storefront's packages and the
// internal helpers; the load test talks HTTP and uses only internal/ helpers and its own
// packages, each of which imports only the layers below it (loadtestLayers); the internal
// helpers use one another, and dbtest the models it opens.
func TestDependencyPicture(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "./...").Output()
	require.NoError(t, err)
	allowed := map[string][]string{ // package -> project packages it may import directly
		"":                 {"handlers", "inventory", "locking", "models", "internal/redisproc", "internal/tracing", "lab"}, // the command; lab only from demo.go
		"handlers":         {"inventory"},
		"inventory":        {"locking", "models"},
		"locking":          {},
		"models":           {},
		"pitfalls":         {"inventory"},
		"lab":              {"handlers", "inventory", "locking", "pitfalls", "internal/"},
		"sim":              {"handlers", "inventory", "locking", "models", "internal/"}, // the simulator (docs/simulation.md)
		"internal/":        {"internal/"},                                               // every internal/ package not named below
		"internal/dbtest":  {"internal/", "models"},
		"internal/tracing": {}, // the OpenTelemetry SDK and the libraries' instrumentation, nothing of ours
	}
	ruled := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "loadtest" || strings.HasPrefix(rel, "loadtest/") {
			ruled[rel] = true
			for _, msg := range loadtestImports(rel, strings.Fields(imports)) {
				t.Error(msg)
			}
			continue
		}
		may, ok := allowed[rel]
		if !ok && strings.HasPrefix(rel, "internal/") {
			may, ok = allowed["internal/"]
		}
		if !ok {
			continue
		}
		ruled[rel] = true
		for _, imp := range strings.Fields(imports) {
			dep, ours := strings.CutPrefix(imp, module+"/")
			if !ours {
				continue
			}
			ok := slices.ContainsFunc(may, func(p string) bool {
				return dep == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(dep, p))
			})
			if !ok {
				t.Errorf("%s imports %s: the picture allows only %v", cmp.Or(rel, "main (the command)"), dep, may)
			}
		}
	}
	for _, pkg := range []string{"", "handlers", "inventory", "locking", "models", "pitfalls", "lab", "loadtest", "sim", "internal/procutil"} {
		assert.True(t, ruled[pkg], "%s was listed and ruled", pkg)
	}
	for _, layer := range loadtestLayers {
		for _, pkg := range layer {
			assert.True(t, ruled[pkg], "%s was listed and ruled", pkg)
		}
	}
}

// TestTracingSeams keeps OpenTelemetry where docs/DESIGN.md §2.2 puts it: the SDK, the
// exporter and the libraries' instrumentation (otelgin, redisotel, otelsql) in
// internal/tracing only; inventory and the command's logging use the API alone (a tracer
// handed in, a span from a context), and locking uses none of it (go-redis and the standard
// library only).
func TestTracingSeams(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, ".", "./handlers", "./inventory", "./locking", "./models").Output()
	require.NoError(t, err)
	api := []string{"go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/attribute", "go.opentelemetry.io/otel/codes"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := cmp.Or(strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/"), "main (the command)")
		for _, imp := range strings.Fields(imports) {
			otel := strings.HasPrefix(imp, "go.opentelemetry.io/") || strings.Contains(imp, "otelsql") || strings.Contains(imp, "redisotel")
			switch {
			case !otel:
			case rel == "locking":
				t.Errorf("locking imports %s: it imports go-redis and the standard library only", imp)
			case !slices.Contains(api, imp):
				t.Errorf("%s imports %s: the SDK and the instrumentation live in internal/tracing", rel, imp)
			}
		}
	}
}

// loadtestLayers are the load test's packages in layers, from the bottom: a package imports
// only packages of the layers below its own (besides internal/ helpers); the packages of one
// layer do not know each other. The command (loadtest, flags to a scenario) is the top.
var loadtestLayers = [][]string{
	{"loadtest/config"}, // the run's settings, as the flags give them
	{"loadtest/client"}, // the storefront's HTTP API; a purchase and every attempt of it
	{"loadtest/cluster", "loadtest/checks", "loadtest/soak"}, // start and stop the processes; judge a run (invariants, history; leaks over time)
	{"loadtest/workload", "loadtest/fault"},                  // what the buyers send; what breaks meanwhile
	{"loadtest/report"},                                      // text, JSON, HTML
	{"loadtest/scenario"},                                    // the comparison, -perf, -scenario pitfalls
	{"loadtest"},                                             // the command
}

// loadtestTestKit is the package of the load test's shared test helpers: only tests import it,
// and it sits on the layer above the client's.
const loadtestTestKit = "loadtest/internal/testkit"

// loadtestImports returns what is wrong with the imports of the load test's package rel.
func loadtestImports(rel string, imports []string) []string {
	layerOf := func(pkg string) int {
		if pkg == loadtestTestKit {
			return 2
		}
		for i, layer := range loadtestLayers {
			if slices.Contains(layer, pkg) {
				return i
			}
		}
		return -1
	}
	own := layerOf(rel)
	if own < 0 {
		return []string{rel + " is in no layer of loadtestLayers: place it"}
	}
	var wrong []string
	for _, imp := range imports {
		dep, ours := strings.CutPrefix(imp, module+"/")
		switch {
		case !ours || strings.HasPrefix(dep, "internal/"):
		case dep == loadtestTestKit:
			wrong = append(wrong, fmt.Sprintf("%s imports %s: only tests import it", rel, dep))
		case !strings.HasPrefix(dep, "loadtest/"):
			wrong = append(wrong, fmt.Sprintf("%s imports %s: the load test talks HTTP and uses only internal/ helpers and its own packages", rel, dep))
		case layerOf(dep) < 0 || layerOf(dep) >= own:
			wrong = append(wrong, fmt.Sprintf("%s (layer %d) imports %s (layer %d): a package imports only the layers below its own (loadtestLayers)",
				rel, own, dep, layerOf(dep)))
		}
	}
	return wrong
}

// TestLoadTestFileSizes: the load test's command (package main) stays flags to a scenario, at
// most 300 lines; no Go file of the load test passes 500 lines.
func TestLoadTestFileSizes(t *testing.T) {
	mainLines := 0
	err := filepath.WalkDir("loadtest", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := bytes.Count(b, []byte("\n"))
		assert.LessOrEqual(t, n, 500, "%s: %d lines: cut it by concept", path, n)
		if filepath.Dir(path) == "loadtest" && !strings.HasSuffix(path, "_test.go") {
			mainLines += n
		}
		return nil
	})
	require.NoError(t, err)
	assert.Positive(t, mainLines)
	assert.LessOrEqual(t, mainLines, 300, "the load test's package main: flags to a scenario and nothing else")
}

// The command ships no test kit: what its binary links in names none of the packages that
// start test servers or assert.
func TestCommandLinksNoTestKit(t *testing.T) {
	for _, tags := range []string{"", "nodemo"} {
		for _, dep := range deps(t, tags) {
			for _, kit := range []string{module + "/internal/redistest", module + "/internal/pgtest", module + "/internal/dbtest",
				module + "/internal/browsertest", "github.com/stretchr/testify", "github.com/chromedp/chromedp", "testing"} {
				if dep == kit || strings.HasPrefix(dep, kit+"/") {
					t.Errorf("the command (tags %q) links %s", tags, dep)
				}
			}
		}
	}
}

// Built with -tags nodemo the command has no lab and no demo strategies: it links neither
// package lab nor package pitfalls. The default build links both.
func TestNodemoBuildLeavesTheDemoOut(t *testing.T) {
	without, with := deps(t, "nodemo"), deps(t, "")
	for _, pkg := range []string{module + "/lab", module + "/pitfalls"} {
		assert.NotContains(t, without, pkg)
		assert.Contains(t, with, pkg)
	}
}

// The command builds with -tags nodemo (make test built it once: no build here then).
func TestNodemoStorefrontBuilds(t *testing.T) {
	testutil.SkipShort(t, testutil.Build)
	_, err := storefrontbin.Shared(context.Background(), ".", t.TempDir(), "nodemo") // make test's nodemo build when STOCKGUARD_BIN_NODEMO names it
	require.NoError(t, err)
}

// deps lists what `go list -deps .` names with the build tags.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

// The root is only the command: at most 8 Go files besides tests, each one part of starting it
// (the metrics wiring and the leak switch live in handlers).
func TestRootIsOnlyTheCommand(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var src []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			src = append(src, f)
		}
	}
	assert.LessOrEqual(t, len(src), 8, "the root's Go files besides tests: %v", src)
}
