package sim

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// redisWorld is the run's Redis: one miniredis whose TTLs follow the bubble's clock
// (ClockTTL), served over net.Pipe connections that go-redis dials through its Dialer option.
// The client end of each pipe is wrapped so that the schedule can hang or slow every answer.
type redisWorld struct {
	m *miniredis.Miniredis

	mu    sync.Mutex
	hang  chan struct{} // non-nil while Redis hangs: closed when it answers again
	late  time.Duration // added before each answer is read
	conns map[*pipeConn]int
	dead  map[int]bool // processes killed: their dials fail
}

func newRedisWorld() *redisWorld {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	return &redisWorld{m: m, conns: map[*pipeConn]int{}, dead: map[int]bool{}}
}

var errDialDead = errors.New("sim: the process was killed")

// dialer is process proc's go-redis Dialer.
func (r *redisWorld) dialer(proc int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		// A hung Redis still accepts connections (the kernel completes the handshake): the
		// dial succeeds and the reads hang. go-redis dials its pub/sub connection holding a
		// mutex, which the bubble cannot see waiting: a dial that waited would stall it.
		r.mu.Lock()
		dead := r.dead[proc]
		r.mu.Unlock()
		if dead {
			return nil, errDialDead
		}
		c, err := r.m.Dial()
		if err != nil {
			return nil, err
		}
		pc := newPipeConn(c, r)
		r.mu.Lock()
		r.conns[pc] = proc
		r.mu.Unlock()
		return pc, nil
	}
}

// cut closes the connections of proc (every process's when proc < 0).
func (r *redisWorld) cut(proc int) {
	r.mu.Lock()
	var cs []*pipeConn
	for c, p := range r.conns {
		if proc < 0 || p == proc {
			cs = append(cs, c)
		}
	}
	r.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

func (r *redisWorld) kill(proc int) {
	r.mu.Lock()
	r.dead[proc] = true
	r.mu.Unlock()
	r.cut(proc)
}

// restart is Redis restarting empty: every key lost, every connection dropped.
func (r *redisWorld) restart() {
	r.m.FlushAll()
	r.cut(-1)
}

func (r *redisWorld) setHang(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case on && r.hang == nil:
		r.hang = make(chan struct{})
	case !on && r.hang != nil:
		close(r.hang)
		r.hang = nil
	}
}

func (r *redisWorld) setLate(d time.Duration) {
	r.mu.Lock()
	r.late = d
	r.mu.Unlock()
}

func (r *redisWorld) close() {
	r.setHang(false)
	r.cut(-1)
	r.m.Close()
}

// pipeConn is the client end of one pipe to miniredis, with a socket's buffers in both
// directions: a write never waits for the server to read, and the server's answers are read
// off the pipe as they come (so miniredis never waits for a slow client either). Both ends
// hold mutexes across their I/O (go-redis's pub/sub connection, miniredis's peer), and a
// goroutine waiting on a mutex is a wait the bubble cannot see: with a bare net.Pipe, one
// end waiting for the other froze the bubble's clock. Read serves the buffered answers, after
// the schedule's hang or delay.
type pipeConn struct {
	net.Conn
	r *redisWorld

	mu       sync.Mutex
	deadline time.Time     // the read deadline
	out      []byte        // written, not yet sent
	in       []byte        // received, not yet read
	inErr    error         // the pipe's read error, once in is drained
	more     chan struct{} // (1) out has bytes
	arrived  chan struct{} // (1) in has bytes, or inErr is set
	closed   chan struct{}
	once     sync.Once
	writes   atomic.Int64 // writes so far
}

func newPipeConn(c net.Conn, r *redisWorld) *pipeConn {
	pc := &pipeConn{Conn: c, r: r, closed: make(chan struct{}), more: make(chan struct{}, 1), arrived: make(chan struct{}, 1)}
	go pc.pumpOut()
	go pc.pumpIn()
	return pc
}

// handshakeWrites is how many writes a new go-redis connection makes before its first command.
const handshakeWrites = 2

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Write queues b for pumpOut, as a socket's send buffer takes it.
func (c *pipeConn) Write(b []byte) (int, error) {
	progress.Add(1)
	c.writes.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	c.out = append(c.out, b...)
	signal(c.more)
	return len(b), nil
}

// pumpOut writes what Write queued to the pipe, until the connection closes.
func (c *pipeConn) pumpOut() {
	for {
		select {
		case <-c.more:
		case <-c.closed:
			return
		}
		c.mu.Lock()
		b := c.out
		c.out = nil
		c.mu.Unlock()
		if _, err := c.Conn.Write(b); err != nil {
			_ = c.Close()
			return
		}
	}
}

// pumpIn reads the server's answers off the pipe as they come, until it closes.
func (c *pipeConn) pumpIn() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Conn.Read(buf)
		c.mu.Lock()
		c.in = append(c.in, buf[:n]...)
		if err != nil {
			c.inErr = err
		}
		c.mu.Unlock()
		signal(c.arrived)
		if err != nil {
			return
		}
	}
}

func (c *pipeConn) Read(b []byte) (int, error) {
	c.r.mu.Lock()
	hang, late := c.r.hang, c.r.late
	c.r.mu.Unlock()
	c.mu.Lock()
	deadline := c.deadline
	c.mu.Unlock()
	var expire <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expire = t.C
	}
	if c.writes.Load() > handshakeWrites {
		// A connection's handshake (go-redis's HELLO, then its setup pipeline) is answered at
		// once, hang or not: go-redis reads it holding its pub/sub connection's mutex, where
		// another goroutine's wait would freeze the bubble. A real hung Redis would not.
		if hang != nil {
			select {
			case <-hang:
			case <-c.closed:
				return 0, net.ErrClosed
			case <-expire:
				return 0, os.ErrDeadlineExceeded
			}
		}
		if late > 0 {
			t := time.NewTimer(late)
			defer t.Stop()
			select {
			case <-t.C:
			case <-c.closed:
				return 0, net.ErrClosed
			case <-expire:
				return 0, os.ErrDeadlineExceeded
			}
		}
	}
	for {
		c.mu.Lock()
		if len(c.in) > 0 {
			n := copy(b, c.in)
			c.in = c.in[n:]
			if len(c.in) > 0 {
				signal(c.arrived)
			}
			c.mu.Unlock()
			return n, nil
		}
		err := c.inErr
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-c.arrived:
		case <-c.closed:
			return 0, net.ErrClosed
		case <-expire:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (c *pipeConn) SetDeadline(t time.Time) error {
	c.setRead(t)
	return nil
}

func (c *pipeConn) SetReadDeadline(t time.Time) error {
	c.setRead(t)
	return nil
}

// SetWriteDeadline does nothing: a write only queues.
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }

func (c *pipeConn) setRead(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
}

func (c *pipeConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.r.mu.Lock()
		delete(c.r.conns, c)
		c.r.mu.Unlock()
	})
	return c.Conn.Close()
}
