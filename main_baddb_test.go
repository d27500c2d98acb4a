package main

import (
	"context"
	"net"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A --db that cannot be opened ends the command with one ERROR line, its own ("stockguard
// failed", naming the cause), and exit status 1: GORM writes no ERROR line of its own beside it.
func TestBadDatabaseOneErrorLine(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := l.Addr().String()
	require.NoError(t, l.Close())

	for name, tc := range map[string]struct{ db, cause string }{
		"postgres refused":   {"postgres://bad:bad@" + refused + "/x", "connection refused"},
		"sqlite no such dir": {filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), "unable to open database file"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr logSink
			code := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--db", tc.db}, func(string) string { return "" }, &stderr)
			assert.Equal(t, 1, code)
			errs := regexp.MustCompile(`(?m)^.*level=ERROR.*$`).FindAllString(stderr.String(), -1)
			require.Len(t, errs, 1, "one ERROR line:\n%s", stderr.String())
			assert.Contains(t, errs[0], `msg="stockguard failed"`)
			assert.Contains(t, errs[0], tc.cause)
		})
	}
}
