package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDependencyPicture keeps the imports between the project's packages as docs/DESIGN.md §2.2
// draws them: main wires everything; handlers imports only inventory; inventory imports locking
// and models; locking and models import no package of the project; the load test talks HTTP
// and uses only internal/ process helpers.
func TestDependencyPicture(t *testing.T) {
	const mod = "github.com/stockguard/stockguard"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "./...").Output()
	require.NoError(t, err)
	allowed := map[string][]string{ // package -> project packages it may import directly
		"handlers":  {"inventory"},
		"inventory": {"locking", "models"},
		"locking":   {},
		"models":    {},
		"pitfalls":  {"inventory"},
		"loadtest":  {"internal/"},
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
		may, ruled := allowed[rel]
		if !ruled {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			dep, ours := strings.CutPrefix(imp, mod+"/")
			if !ours {
				continue
			}
			ok := slices.ContainsFunc(may, func(p string) bool {
				return dep == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(dep, p))
			})
			if !ok {
				t.Errorf("%s imports %s: the picture allows only %v", rel, dep, may)
			}
		}
	}
}
