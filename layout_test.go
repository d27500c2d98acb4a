package main

import (
	"cmp"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/stockguard/stockguard"

// TestDependencyPicture keeps the imports between the project's packages as docs/DESIGN.md §2.2
// draws them: main wires everything; handlers imports only inventory; inventory imports locking
// and models; locking and models import no package of the project; pitfalls (the demo's broken
// locks) plugs into inventory only; the lab sits on top of the storefront's packages and the
// internal helpers; the load test talks HTTP and uses only internal/ helpers; the internal
// helpers use one another, and dbtest the models it opens.
func TestDependencyPicture(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "./...").Output()
	require.NoError(t, err)
	allowed := map[string][]string{ // package -> project packages it may import directly
		"":                {"handlers", "inventory", "locking", "models", "internal/redisproc", "lab"}, // the command; lab only from demo.go
		"handlers":        {"inventory"},
		"inventory":       {"locking", "models"},
		"locking":         {},
		"models":          {},
		"pitfalls":        {"inventory"},
		"lab":             {"handlers", "inventory", "locking", "pitfalls", "internal/"},
		"loadtest":        {"internal/"},
		"internal/":       {"internal/"}, // every internal/ package not named below
		"internal/dbtest": {"internal/", "models"},
	}
	ruled := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
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
	for _, pkg := range []string{"", "handlers", "inventory", "locking", "models", "pitfalls", "lab", "loadtest", "internal/procutil"} {
		assert.True(t, ruled[pkg], "%s was listed and ruled", pkg)
	}
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
// package lab nor package pitfalls, and it builds. The default build links both.
func TestNodemoBuildLeavesTheDemoOut(t *testing.T) {
	without, with := deps(t, "nodemo"), deps(t, "")
	for _, pkg := range []string{module + "/lab", module + "/pitfalls"} {
		assert.NotContains(t, without, pkg)
		assert.Contains(t, with, pkg)
	}
	out, err := exec.Command("go", "build", "-tags", "nodemo", "-o", filepath.Join(t.TempDir(), "stockguard"), ".").CombinedOutput()
	require.NoError(t, err, "go build -tags nodemo .: %s", out)
}

// deps lists what `go list -deps .` names with the build tags.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}
