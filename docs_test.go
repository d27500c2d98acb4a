package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README is the front door: short, linking to docs/ pages that link back and to each
// other; no relative link of any Markdown file of the repository points to a missing file or
// a missing heading.

// readmeMaxLines is the front door's length limit.
const readmeMaxLines = 250

func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	n := strings.Count(string(b), "\n")
	if !strings.HasSuffix(string(b), "\n") {
		n++
	}
	assert.LessOrEqual(t, n, readmeMaxLines, "README.md is the front door: move the details to docs/")
}

// Every page of docs/ is linked from README.md and links back to it.
func TestDocsReachable(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	readme := linkTargets(t, "README.md")
	for _, p := range pages {
		assert.Contains(t, readme, p, "README.md links %s", p)
		if filepath.Base(p) != "DESIGN.md" {
			assert.Contains(t, linkTargets(t, p), "README.md", "%s links back to README.md", p)
		}
	}
}

// Every relative link of every Markdown file (README.md, docs/, the package READMEs) names a
// file that exists, and its #anchor a heading of that file, by GitHub's heading slugs.
func TestDocsLinks(t *testing.T) {
	var files []string
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	}))
	require.Contains(t, files, "README.md")
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		for _, l := range markdownLinks(t, file) {
			target, anchor, _ := strings.Cut(l, "#")
			if target == "" {
				target = file
			} else {
				target = filepath.Join(filepath.Dir(file), target)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %q: %s does not exist", file, l, target)
				continue
			}
			checked++
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", file, l)
				continue
			}
			if anchors[target] == nil {
				anchors[target] = headingSlugs(t, target)
			}
			if !anchors[target][anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", file, l, target, anchor)
			}
		}
	}
	assert.Greater(t, checked, 100, "the links were found")
}

var (
	fenceRE    = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
	codeSpanRE = regexp.MustCompile("`[^`\n]*`")
	linkRE     = regexp.MustCompile(`!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingRE  = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
)

// markdownText is file's Markdown without its fenced code blocks.
func markdownText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	return fenceRE.ReplaceAllString(string(b), "")
}

// markdownLinks returns the relative link targets of file (links and images), outside code.
func markdownLinks(t *testing.T, file string) []string {
	t.Helper()
	text := codeSpanRE.ReplaceAllString(markdownText(t, file), "code")
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// linkTargets returns file's relative link targets without anchors, relative to the
// repository root.
func linkTargets(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	for _, l := range markdownLinks(t, file) {
		if target, _, _ := strings.Cut(l, "#"); target != "" {
			out = append(out, filepath.Join(filepath.Dir(file), target))
		}
	}
	return out
}

// headingSlugs returns the anchors GitHub gives file's headings: the heading's text
// (code spans, links and emphasis rendered), lower-cased, every character but letters,
// digits, '_', '-' and spaces dropped, spaces turned into '-'; a repeated slug gets -1, -2...
func headingSlugs(t *testing.T, file string) map[string]bool {
	t.Helper()
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(markdownText(t, file), -1) {
		s := githubSlug(m[1])
		if n := seen[s]; n > 0 {
			slugs[s+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

var inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func githubSlug(heading string) string {
	text := inlineLinkRE.ReplaceAllString(heading, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start":                           "quick-start",
		"Six ways to sell, three of them wrong": "six-ways-to-sell-three-of-them-wrong",
		"The lock (`locking/`)":                 "the-lock-locking",
		"One instance per item (nginx)":         "one-instance-per-item-nginx",
		"12. Invariants the load test checks":   "12-invariants-the-load-test-checks",
		"3.5 Replica acknowledgement (`Options.Replicas`, `--lock-replicas`)": "35-replica-acknowledgement-optionsreplicas---lock-replicas",
		"Carts and holds: `-workload cart`, `-workload holds`":                "carts-and-holds--workload-cart--workload-holds",
		"`-scenario pitfalls`":           "-scenario-pitfalls",
		"See [the lab](docs/lab.md) × 2": "see-the-lab--2",
	} {
		assert.Equal(t, want, githubSlug(heading), heading)
	}
}
