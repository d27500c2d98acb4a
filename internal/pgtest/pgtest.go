// Package pgtest gives tests a real, private PostgreSQL server (internal/pgproc): one server
// per test package, started on first use and stopped by the package's TestMain, and a fresh
// database per test, dropped when the test ends.
//
//	var pg pgtest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		pg.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		url := pg.Database(t) // postgres://... of an empty database
//	}
//
// A server that cannot start (binaries missing, no unprivileged user when root) fails the
// test with the reason; nothing is skipped.
package pgtest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/pgproc"
)

// Shared is a package's PostgreSQL server, started by the first Database or Server call. The
// zero value is ready to use; Close (from TestMain) stops it.
type Shared struct {
	once sync.Once
	srv  *pgproc.Server
	err  error
	seq  atomic.Int64
}

// Server returns the running server, starting it on first use; it fails tb if the server
// cannot start.
func (s *Shared) Server(tb testing.TB) *pgproc.Server {
	tb.Helper()
	s.once.Do(func() {
		s.srv, s.err = pgproc.Start(pgproc.Options{})
	})
	if s.err != nil {
		tb.Fatalf("pgtest: the PostgreSQL backend cannot start: %v", s.err)
	}
	return s.srv
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// Database creates an empty database for tb and returns its URL; the database is dropped
// (its connections closed) when tb ends.
func (s *Shared) Database(tb testing.TB) string {
	tb.Helper()
	srv := s.Server(tb)
	name := fmt.Sprintf("t%d_%s", s.seq.Add(1), strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(tb.Name()), "_"), "_"))
	if len(name) > 60 {
		name = name[:60]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, err := srv.CreateDatabase(ctx, name)
	if err != nil {
		tb.Fatalf("pgtest: %v (server output: %q)", err, srv.Output())
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Restart(); err != nil { // a test may have left it stopped
			tb.Errorf("pgtest: restart after the test: %v", err)
			return
		}
		if err := srv.DropDatabase(ctx, name); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return url
}

// Close stops the server, if it was started, and removes its directory.
func (s *Shared) Close() {
	s.once.Do(func() {}) // a Close before any use starts nothing
	if s.srv != nil {
		s.srv.Close()
	}
}
