// Package pgproc runs a private PostgreSQL server for a process's own use: initdb into a fresh
// temporary directory, the server on a free loopback port, stopped and removed by Close. The
// load test uses it for its self-contained PostgreSQL runs, internal/pgtest for tests.
//
// When the process runs as root (PostgreSQL refuses to), initdb and the server run as an
// unprivileged OS user, "postgres" by default (the Debian package postgresql creates it): the
// temporary directory is created directly under os.TempDir() (a test's t.TempDir() sits under
// 0700 root-owned parents that user cannot reach) and handed to that user.
//
// The server binaries are found with `pg_config --bindir`, then in /usr/lib/postgresql/<newest
// version>/bin, then on PATH.
package pgproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/procutil"
)

// ErrNoPostgres is returned when the PostgreSQL server binaries cannot be found.
var ErrNoPostgres = errors.New("pgproc: PostgreSQL server binaries (initdb, postgres) not found via `pg_config --bindir`, " +
	"/usr/lib/postgresql/*/bin or PATH; install them with `apt-get install -y postgresql` (Debian package postgresql) or run `make test`, which does")

// Superuser is the database superuser of a server started here (initdb -U), reached without
// a password (trust authentication, loopback only).
const Superuser = "postgres"

// readyLimit bounds the wait for a started server to accept connections.
const readyLimit = 30 * time.Second

// Options configures Start. The zero value is a server for tests: no fsync.
type Options struct {
	// Durable keeps fsync and full-page writes on, so that a crash of the machine loses no
	// committed data. Off by default (tests, the load test): every commit still reaches the
	// kernel before it returns, so a crash of the server loses nothing.
	Durable bool
	// Settings are extra server settings (postgres -c name=value); they win over the defaults.
	Settings map[string]string
	// OSUser runs initdb and the server as this OS user when the process is root. Default:
	// "postgres".
	OSUser string
}

// Server is one PostgreSQL server started by this process. Close stops it and removes its
// directory; nothing it started outlives Close.
type Server struct {
	Host   string // 127.0.0.1
	Port   int
	Dir    string // the temporary directory; the cluster is in Dir/data
	BinDir string

	args []string
	cred *syscall.Credential // nil when not root

	mu      sync.Mutex
	proc    *exec.Cmd     // nil while stopped
	exited  chan struct{} // closed when proc has exited
	out     *procutil.LimitedBuffer
	closed  bool
	removed bool
}

// BinDir returns the directory of the PostgreSQL server binaries, or ErrNoPostgres.
func BinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		version := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
		sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
		for _, d := range dirs {
			if has(d) {
				return d, nil
			}
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNoPostgres
}

// Start creates a cluster in a fresh temporary directory and starts its server on a free
// loopback port, and waits until it accepts connections. It returns an error naming the
// reason (binaries missing, no unprivileged user, initdb's or the server's output) when the
// server does not come up; nothing is left behind then.
func Start(opts Options) (_ *Server, err error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{Host: "127.0.0.1", BinDir: bin}
	if os.Geteuid() == 0 {
		name := opts.OSUser
		if name == "" {
			name = "postgres"
		}
		if s.cred, err = credentialOf(name); err != nil {
			return nil, err
		}
	}
	if s.Dir, err = os.MkdirTemp("", "pgproc-*"); err != nil {
		return nil, fmt.Errorf("pgproc: temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(s.Dir)
		}
	}()
	if s.cred != nil {
		if err := os.Chown(s.Dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgproc: hand %s to the server's user: %w", s.Dir, err)
		}
		if err := reachable(s.Dir, s.cred); err != nil {
			return nil, err
		}
	}
	if err := s.initdb(); err != nil {
		return nil, err
	}
	s.args = serverArgs(opts)
	for attempt := 0; ; attempt++ { // a probed free port may be taken before the server binds it
		if s.Port, err = freePort(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		err = s.startLocked(1)
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		if attempt == 4 {
			return nil, err
		}
	}
}

func credentialOf(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("pgproc: running as root, and PostgreSQL refuses to run as root: no OS user %q to run it as "+
			"(the Debian package postgresql creates it): %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// reachable checks that every parent of dir lets cred's user through (search permission).
func reachable(dir string, cred *syscall.Credential) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgproc: %w", err)
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		mode := st.Mode().Perm()
		ok := mode&0o001 != 0 ||
			(sys != nil && sys.Uid == cred.Uid && mode&0o100 != 0) ||
			(sys != nil && sys.Gid == cred.Gid && mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("pgproc: the server's OS user (uid %d) cannot reach %s: its parent %s is %s; "+
				"set TMPDIR to a directory that user can traverse (e.g. /tmp)", cred.Uid, dir, d, mode)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.BinDir, name), args...)
	cmd.Dir = s.Dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG")
	}), "LC_ALL=C")
	// Own process group: a terminal's Ctrl-C reaches only this process, which then stops the
	// server in order. Pdeathsig: if this process dies abruptly, the kernel kills the server
	// (set after the user change, so it holds).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.cred}
	return cmd
}

func (s *Server) initdb() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := s.command("initdb", "-D", s.dataDir(), "-U", Superuser, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions")
	out := &procutil.LimitedBuffer{Max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := startAndWait(ctx, cmd); err != nil {
		return fmt.Errorf("pgproc: initdb in %s: %w (output: %q)", s.dataDir(), err, out.String())
	}
	return nil
}

func startAndWait(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // owner: startAndWait; it waits for it below
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// serverArgs returns the postgres command line settings: loopback TCP only (no Unix socket),
// logs to stderr, and, unless opts.Durable, no fsync.
func serverArgs(opts Options) []string {
	set := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		"max_connections":         "300",
		"shared_buffers":          "64MB",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
		"log_destination":         "stderr",
	}
	if !opts.Durable {
		// A commit is still written to the kernel before it returns (synchronous_commit stays
		// on), so it survives a crash of the server, not one of the machine: SQLite's bargain
		// with synchronous=NORMAL in WAL mode, which the storefront uses.
		set["fsync"] = "off"
		set["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		set[k] = v
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var args []string
	for _, k := range keys {
		args = append(args, "-c", k+"="+set[k])
	}
	return args
}

// Restart starts the server again on its port after Stop or Kill (a server stopped by Kill
// runs crash recovery first), and waits until it accepts connections. It is a no-op while the
// server runs.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgproc: server is closed")
	}
	if s.proc != nil {
		return nil
	}
	return s.startLocked(50) // after a stop, the old socket may linger briefly
}

// startLocked starts the server, trying up to attempts times while the port is taken.
func (s *Server) startLocked(attempts int) error {
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		out := &procutil.LimitedBuffer{Max: 8 << 10}
		cmd := s.command("postgres", append([]string{"-D", s.dataDir(), "-p", strconv.Itoa(s.Port)}, s.args...)...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("pgproc: start postgres: %w", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }() // owner: s; stop waits for it
		s.proc, s.exited, s.out = cmd, exited, out
		err := s.waitReady(readyLimit)
		if err == nil {
			return nil
		}
		s.stopLocked(syscall.SIGQUIT, 0)
		lastErr = fmt.Errorf("pgproc: postgres on %s:%d: %w (output: %q)", s.Host, s.Port, err, out.String())
		if !strings.Contains(out.String(), "could not bind") && !strings.Contains(out.String(), "Address already in use") {
			return lastErr
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lastErr
}

// waitReady waits until the server accepts connections, and checks that the one answering is
// ours (same data directory): when the port was taken, another server answers while ours exits.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var dir string
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			if filepath.Clean(dir) == s.dataDir() {
				return nil
			}
			err = fmt.Errorf("another server (data directory %s) answers on the port", dir)
		}
		select {
		case <-s.exited:
			return errors.New("exited during start-up")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections after %s: %w", limit, err)
		}
	}
}

// URL returns a postgres:// URL of database on the server, as the superuser, without TLS.
func (s *Server) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)),
		Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// CreateDatabase creates the empty database name and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := s.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgproc: create database %q: %w", name, err)
	}
	return s.URL(name), nil
}

// DropDatabase drops the database name, closing its connections (WITH (FORCE)).
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if err := s.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgproc: drop database %q: %w", name, err)
	}
	return nil
}

func (s *Server) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// PID returns the server's (postmaster's) process id, 0 while stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Process.Pid
}

// Stop shuts the server down in "fast" mode (SIGINT: open transactions are rolled back, clients
// disconnected) and waits for it; the data stays for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGINT, 10*time.Second)
}

// Kill stops the server in "immediate" mode (SIGQUIT: every backend exits at once, as in a
// crash; the next start runs recovery) and waits for it; the data stays for Restart.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGQUIT, 0)
}

func (s *Server) stopLocked(sig syscall.Signal, grace time.Duration) {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Signal(syscall.SIGCONT)
	_ = s.proc.Process.Signal(sig)
	if grace <= 0 {
		grace = 5 * time.Second
	}
	select {
	case <-s.exited:
	case <-time.After(grace):
		_ = s.proc.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.exited:
		case <-time.After(3 * time.Second):
			_ = s.proc.Process.Kill()
			<-s.exited
		}
	}
	s.proc, s.exited = nil, nil
}

// Output returns the first lines the server wrote (warnings and errors) since its last start.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

// Close stops the server (fast shutdown) and removes its directory.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGINT, 10*time.Second)
	s.closed = true
	if !s.removed {
		_ = os.RemoveAll(s.Dir)
		s.removed = true
	}
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	port, err := procutil.FreePort()
	if err != nil {
		return 0, fmt.Errorf("pgproc: %w", err)
	}
	return port, nil
}
