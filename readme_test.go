package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// The examples of README.md and docs/*.md are run as written, against the server their text
// starts, and what they print is compared with the answers they show: they cannot drift from
// the code, and wherever an example moves among those pages its test follows it.

// readmeBlock returns the lines of the one ```sh block of README.md or docs/*.md that contains
// marker.
func readmeBlock(t *testing.T, marker string) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	var found [][]string
	var where []string
	for _, page := range append([]string{"README.md"}, pages...) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
			if strings.Contains(block[1], marker) {
				found = append(found, strings.Split(strings.TrimRight(block[1], "\n"), "\n"))
				where = append(where, page)
			}
		}
	}
	require.Len(t, found, 1, "one sh block with %q in README.md and docs/*.md; found in %v", marker, where)
	return found[0]
}

// curlCall is one curl command of the README.
type curlCall struct {
	method, url, body string
	headers           [][2]string
}

// parseCurl reads `curl -s [-o /dev/null] [-X M] [-H 'K: V']... [-d 'body'] URL` (the
// forms the README uses), with base replacing localhost:8080.
func parseCurl(t *testing.T, line, base string) curlCall {
	t.Helper()
	line, _, _ = strings.Cut(line, " | ") // a pipe filters what is printed; the call is the same
	line = strings.TrimSuffix(strings.TrimSpace(line), "&")
	words := shellWords(t, line)
	require.Equal(t, "curl", words[0], line)
	c := curlCall{method: http.MethodGet}
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case "-s":
		case "-o":
			i++
		case "-X":
			i++
			c.method = words[i]
		case "-H":
			i++
			k, v, ok := strings.Cut(words[i], ":")
			require.True(t, ok, line)
			c.headers = append(c.headers, [2]string{k, strings.TrimSpace(v)})
		case "-d":
			i++
			c.body = words[i]
			if c.method == http.MethodGet {
				c.method = http.MethodPost
			}
		default:
			require.True(t, strings.HasPrefix(w, "localhost:8080/"), "unknown curl word %q in %q", w, line)
			c.url = base + strings.TrimPrefix(w, "localhost:8080")
		}
	}
	return c
}

// shellWords splits a command line on spaces, honouring single and double quotes.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	quote, in := rune(0), false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	require.Zero(t, quote, "unbalanced quote in %q", s)
	if in {
		words = append(words, cur.String())
	}
	return words
}

// do sends c and returns the status and the body.
func (c curlCall) do(t *testing.T) (int, string) {
	t.Helper()
	req, err := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
	require.NoError(t, err)
	for _, h := range c.headers {
		req.Header.Set(h[0], h[1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// README's quick start calls, against `go run .` on a fresh database and Redis: each answer shown
// as "# STATUS BODY" is the answer given ("# STATUS, the same body" repeats the one before).
func TestReadmeQuickStart(t *testing.T) {
	lines := readmeBlock(t, "curl -s localhost:8080/api/items\n")
	t.Chdir(t.TempDir()) // a fresh clone: no stockguard.db yet
	rs := redistest.Start(t)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--admin-token", "readme-token")
	checked, prevBody := 0, ""
	status, body := 0, ""
	for _, line := range lines {
		if strings.HasPrefix(line, "curl ") {
			status, body = parseCurl(t, line, s.url).do(t)
			assert.Less(t, status, 500, "%s: %s", line, body)
			if strings.Contains(line, "/metrics | grep ^stockguard_") {
				assert.Regexp(t, `(?m)^stockguard_`, body, line)
			}
			continue
		}
		m := regexp.MustCompile(`^# (\d{3})(,? )(.*)$`).FindStringSubmatch(line)
		require.NotNil(t, m, "an answer line: %q", line)
		assert.Equal(t, m[1], strconv.Itoa(status), "%s: %s", line, body)
		if strings.HasPrefix(m[3], "the same body") {
			assert.JSONEq(t, prevBody, body, line)
		} else {
			assert.JSONEq(t, m[3], body, line)
		}
		prevBody = body
		checked++
	}
	assert.Equal(t, 4, checked, "Quick start shows four answers")
	_ = s.shutdown()
}

// The naive burst of docs/strategies.md, against `go run . --demo` (its own fresh database): the numbers the
// comment states for item 5 are those /api/stats shows.
func TestReadmeLearnNaive(t *testing.T) {
	lines := readmeBlock(t, "X-Strategy: naive")
	t.Chdir(t.TempDir())
	rs := redistest.Start(t)
	require.Equal(t, "go run . --demo", lines[0])
	s := startServer(t, nil, "--demo", "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--admin-token", "readme-token")
	loop := regexp.MustCompile(`^for i in \$\(seq (\d+)\); do$`).FindStringSubmatch(lines[1])
	require.NotNil(t, loop, lines[1])
	n, _ := strconv.Atoi(loop[1])
	call := parseCurl(t, strings.TrimSuffix(strings.TrimSpace(lines[2]), "\\")+strings.TrimSpace(lines[3]), s.url)
	require.Equal(t, "done; wait", lines[4])
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { call.do(t) })
	}
	wg.Wait()
	statsLine, comment, ok := strings.Cut(lines[5], "#")
	require.True(t, ok, lines[5])
	_, body := parseCurl(t, strings.TrimSpace(statsLine), s.url).do(t)
	var stats []map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &stats))
	item := regexp.MustCompile(`item (\d+) had (\d+) units`).FindStringSubmatch(comment)
	require.NotNil(t, item, comment)
	claims := regexp.MustCompile(`\b(sold_units|oversold_units|stock|order_count) (\d+)\b`).FindAllStringSubmatch(comment, -1)
	require.NotEmpty(t, claims, comment)
	for _, row := range stats {
		if fmt.Sprint(row["item_id"]) != item[1] {
			continue
		}
		assert.Equal(t, item[2], fmt.Sprint(row["initial_stock"]), comment)
		for _, c := range claims {
			assert.Equal(t, c[2], fmt.Sprint(row[c[1]]), "%s: %s", comment, body)
		}
		if strings.Contains(comment, "stock above 0") {
			assert.Positive(t, row["stock"], "%s: %s", comment, body)
		}
		_ = s.shutdown()
		return
	}
	t.Fatalf("no item %s in %s", item[1], body)
}

// The admin example of docs/api.md, with the token it says to set.
func TestReadmeAdminReset(t *testing.T) {
	lines := readmeBlock(t, "api/admin/reset")
	t.Chdir(t.TempDir())
	rs := redistest.Start(t)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--admin-token", "readme-token")
	require.True(t, strings.HasPrefix(lines[0], "TOKEN="), lines[0])
	var calls []string
	for i := 1; i < len(lines); i++ {
		line := strings.ReplaceAll(lines[i], "$TOKEN", "readme-token")
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + strings.TrimSpace(lines[i])
		}
		calls = append(calls, line)
	}
	require.Len(t, calls, 2)
	status, body := parseCurl(t, calls[0], s.url).do(t)
	assert.Equal(t, http.StatusOK, status, body)
	status, body = parseCurl(t, calls[1], s.url).do(t)
	assert.Equal(t, http.StatusOK, status, body)
	_ = s.shutdown()
}
