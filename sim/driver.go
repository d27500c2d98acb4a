package sim

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
)

// driverName is the database/sql driver the simulated processes open the database file with
// (models.WithSQLiteDriver): mattn/go-sqlite3, wrapped.
const driverName = "stockguard-sim-sqlite3"

func init() {
	sql.Register(driverName, &simDriver{})
}

// Errors the wrapped driver answers for a fault. Neither is one the storefront knows: it
// reads them as a database that failed (ErrUnavailable or an internal error), which a buyer
// sees as an answer of unknown outcome.
var (
	errCommitLost   = errors.New("sim: the COMMIT's answer was lost (it committed)")
	errCommitFailed = errors.New("sim: the COMMIT failed (it rolled back)")
	errProcessDead  = errors.New("sim: the process was killed")
)

// worlds are the runs whose databases are open, by id (a DSN parameter names the run). Runs
// follow each other in one test binary; a map keeps a straggling connection of the last one
// from reading the next one's state.
var (
	worldsMu sync.Mutex
	worlds   = map[string]*dbWorld{}
	worldSeq atomic.Int64
)

// dbWorld is the database side of one run: the writer token that serialises the write
// transactions of every process (SQLite's busy handler sleeps in C, where the bubble cannot
// see it wait: the busy timeout is 0 and a writer waits on this channel instead), the
// database's clock, and each process's faults.
type dbWorld struct {
	id     string
	writer chan struct{} // one slot: held from BEGIN to COMMIT or ROLLBACK, and around a write outside a transaction
	step   atomic.Int64  // the database clock's step ahead of the bubble's clock, in ms

	mu    sync.Mutex
	procs map[int]*dbProc

	commits atomic.Int64 // COMMITs that succeeded

	mutation string // the SQL mutation of a mutation run (mutations.go); "" for the real code
}

// dbProc is what one simulated process's connections are subject to.
type dbProc struct {
	mu         sync.Mutex
	dead       bool
	hold       chan struct{} // non-nil while the process's transactions are held: closed when it ends
	slow       time.Duration // added before each statement
	commitLost int           // the next this many COMMITs land but answer an error
	commitFail int           // the next this many COMMITs roll back and answer an error
}

func newDBWorld() *dbWorld {
	w := &dbWorld{id: strconv.FormatInt(worldSeq.Add(1), 10), writer: make(chan struct{}, 1), procs: map[int]*dbProc{}}
	worldsMu.Lock()
	worlds[w.id] = w
	worldsMu.Unlock()
	return w
}

func (w *dbWorld) close() {
	worldsMu.Lock()
	delete(worlds, w.id)
	worldsMu.Unlock()
}

// proc returns process p's fault state, creating it.
func (w *dbWorld) proc(p int) *dbProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.procs[p] == nil {
		w.procs[p] = &dbProc{}
	}
	return w.procs[p]
}

// dsn is the DSN a process opens the run's database file with.
func (w *dbWorld) dsn(path string, proc int) string {
	return fmt.Sprintf("%s?sim_run=%s&sim_proc=%d", path, w.id, proc)
}

// nowMS is the database's clock: the bubble's, stepped by the schedule's clock faults.
func (w *dbWorld) nowMS() int64 { return time.Now().UnixMilli() + w.step.Load() }

// registerClock gives a connection of run w the database's clock: julianday('now'), the SQL
// the storefront's {now} reads on SQLite (inventory's nowMS), answers the run's clock instead
// of the machine's. SQLite lets an application function replace a built-in one of the same
// name and number of arguments.
func registerClock(c *sqlite3.SQLiteConn, w *dbWorld) error {
	return c.RegisterFunc("julianday", func(arg string) (float64, error) {
		if arg != "now" {
			return 0, fmt.Errorf("sim: julianday(%q): only 'now' is simulated", arg)
		}
		// The storefront computes CAST((jd - 2440587.5) * 86400000.0 AS INTEGER): half a
		// millisecond more keeps the float's rounding from flooring it one below.
		return (float64(w.nowMS())+0.5)/86400000.0 + 2440587.5, nil
	}, false)
}

// simDriver opens mattn's connections, each with its run's clock, and wraps each in a conn of
// its process.
type simDriver struct{}

func (d *simDriver) Open(dsn string) (driver.Conn, error) {
	path, raw, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, err
	}
	worldsMu.Lock()
	w := worlds[q.Get("sim_run")]
	worldsMu.Unlock()
	if w == nil {
		return nil, fmt.Errorf("sim: no run %q", q.Get("sim_run"))
	}
	p, err := strconv.Atoi(q.Get("sim_proc"))
	if err != nil {
		return nil, fmt.Errorf("sim: process %q: %w", q.Get("sim_proc"), err)
	}
	proc := w.proc(p)
	if proc.isDead() {
		return nil, errProcessDead
	}
	q.Del("sim_run")
	q.Del("sim_proc")
	// The writer token stands in for the busy handler, which would sleep in C.
	q.Set("_busy_timeout", "0")
	inner := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error { return registerClock(c, w) }}
	c, err := inner.Open(path + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	return &conn{inner: c.(*sqlite3.SQLiteConn), w: w, p: proc}, nil
}

func (p *dbProc) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// before is what a process's statement (or its BEGIN) meets before it runs: a dead process's
// connection is gone (ErrBadConn: database/sql does not reuse it), a held one waits for the
// hold to end (or its context), a slow one sleeps.
func (p *dbProc) before(ctx context.Context, begin bool) error {
	p.mu.Lock()
	dead, hold, slow := p.dead, p.hold, p.slow
	p.mu.Unlock()
	if dead {
		return driver.ErrBadConn
	}
	if hold != nil && begin {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if slow > 0 {
		t := time.NewTimer(slow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if p.isDead() {
		return driver.ErrBadConn
	}
	return nil
}

// conn is one connection of one process.
type conn struct {
	inner *sqlite3.SQLiteConn
	w     *dbWorld
	p     *dbProc
	tx    bool // a transaction of this connection holds the writer token
	cur   *txn // that transaction
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
)

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.p.isDead() {
		return nil, driver.ErrBadConn
	}
	query = mutateSQL(c.w.mutation, query)
	s, err := c.inner.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{inner: s.(*sqlite3.SQLiteStmt), c: c, write: !isRead(query), query: query}, nil
}

func (c *conn) Close() error {
	if c.tx {
		c.tx = false
		<-c.w.writer
	}
	return c.inner.Close()
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// acquire takes the writer token, or gives up when ctx ends (as a busy timeout would).
func (c *conn) acquire(ctx context.Context) error {
	select {
	case c.w.writer <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.p.before(ctx, true); err != nil {
		return nil, err
	}
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	tx, err := c.inner.BeginTx(ctx, opts)
	if err != nil {
		<-c.w.writer
		return nil, err
	}
	c.tx = true
	c.cur = &txn{inner: tx, c: c, opts: opts}
	return c.cur, nil
}

// isRead reports whether query only reads (outside a transaction it takes no writer token).
func isRead(query string) bool {
	q := strings.ToUpper(strings.TrimSpace(query))
	return strings.HasPrefix(q, "SELECT") || strings.HasPrefix(q, "PRAGMA") || strings.HasPrefix(q, "WITH")
}

// around runs one statement of c: its faults first, then, outside a transaction, a write
// under the writer token.
func (c *conn) around(ctx context.Context, write bool, run func() error) error {
	progress.Add(1)
	if err := c.p.before(ctx, false); err != nil {
		return err
	}
	if write && !c.tx {
		if err := c.acquire(ctx); err != nil {
			return err
		}
		defer func() { <-c.w.writer }()
	}
	return run()
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (res driver.Result, err error) {
	query = mutateSQL(c.w.mutation, query)
	if err := c.split(ctx, query); err != nil {
		return nil, err
	}
	err = c.around(ctx, !isRead(query), func() error {
		res, err = c.inner.ExecContext(ctx, query, args)
		return err
	})
	return res, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (rows driver.Rows, err error) {
	query = mutateSQL(c.w.mutation, query)
	if err := c.split(ctx, query); err != nil {
		return nil, err
	}
	// A query that writes (INSERT ... RETURNING) runs to its end in Next: outside a
	// transaction its token would have to outlive the call. The storefront runs those in
	// transactions only; a query outside one is treated as a read.
	err = c.around(ctx, false, func() error {
		rows, err = c.inner.QueryContext(ctx, query, args)
		return err
	})
	return rows, err
}

func (c *conn) Ping(ctx context.Context) error {
	if c.p.isDead() {
		return driver.ErrBadConn
	}
	return c.inner.Ping(ctx)
}

// ResetSession tells database/sql that a dead process's connection is not to be reused.
func (c *conn) ResetSession(context.Context) error {
	if c.p.isDead() {
		return driver.ErrBadConn
	}
	return nil
}

// txn is a transaction holding the writer token: its COMMIT meets the schedule's commit faults.
type txn struct {
	inner   driver.Tx
	c       *conn
	opts    driver.TxOptions
	done    bool
	updates int // stock updates run (the cart-split mutation)
}

func (t *txn) release() {
	if !t.done {
		t.done = true
		t.c.tx = false
		t.c.cur = nil
		<-t.c.w.writer
	}
}

func (t *txn) Commit() error {
	defer t.release()
	p := t.c.p
	p.mu.Lock()
	dead, lost, fail := p.dead, p.commitLost > 0, p.commitFail > 0
	switch {
	case lost:
		p.commitLost--
	case fail:
		p.commitFail--
	}
	p.mu.Unlock()
	if dead || fail {
		_ = t.inner.Rollback()
		if dead {
			return driver.ErrBadConn
		}
		return errCommitFailed
	}
	if err := t.inner.Commit(); err != nil {
		return err
	}
	t.c.w.commits.Add(1)
	if lost {
		return errCommitLost
	}
	return nil
}

func (t *txn) Rollback() error {
	defer t.release()
	return t.inner.Rollback()
}

// stmt is a prepared statement of one connection.
type stmt struct {
	inner *sqlite3.SQLiteStmt
	c     *conn
	write bool
	query string
}

var (
	_ driver.StmtExecContext  = (*stmt)(nil)
	_ driver.StmtQueryContext = (*stmt)(nil)
)

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, errors.New("sim: Exec without a context")
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, errors.New("sim: Query without a context")
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (res driver.Result, err error) {
	if err := s.c.split(ctx, s.query); err != nil {
		return nil, err
	}
	err = s.c.around(ctx, s.write, func() error {
		res, err = s.inner.ExecContext(ctx, args)
		return err
	})
	return res, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (rows driver.Rows, err error) {
	if err := s.c.split(ctx, s.query); err != nil {
		return nil, err
	}
	err = s.c.around(ctx, false, func() error {
		rows, err = s.inner.QueryContext(ctx, args)
		return err
	})
	return rows, err
}
