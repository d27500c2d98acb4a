package locking

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// A node that hangs answers none of the calls in flight on its connections: each waits for
// its own deadline (CallTimeout), then its clean-up may wait another. Once the breaker has
// opened, the process knows them stuck: the opening cuts them (closes every connection
// dialed before it), so that they fail at once, with an error that wraps ErrBreakerOpen and
// says the call may have run (maybeExecuted: its clean-up follows, or is owed). Idle
// connections go with them: the pool drops a closed connection when it next takes it.

// cutConns are the connections a breaker's node client dialed (Breaker.DialHook).
type cutConns struct {
	mu    sync.Mutex
	conns map[*cutConn]struct{}
}

// cutConn is a connection of a watched node client.
type cutConn struct {
	net.Conn
	set  *cutConns
	once sync.Once
}

// NetConn returns the connection it wraps (go-redis checks an idle connection's health
// through it).
func (c *cutConn) NetConn() net.Conn { return c.Conn }

// cutSysConn is a cutConn over a connection with a file descriptor (TCP, Unix): go-redis's
// pool checks an idle one through SyscallConn before handing it out, so one that was cut is
// dropped, not used. (Over TLS go-redis checks nothing: a cut idle connection then fails the
// call that takes it.)
type cutSysConn struct{ *cutConn }

// SyscallConn returns the raw connection of the one it wraps.
func (c cutSysConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// Close closes the connection and forgets it.
func (c *cutConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *cutConns) add(conn net.Conn) net.Conn {
	c := &cutConn{Conn: conn, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = make(map[*cutConn]struct{})
	}
	s.conns[c] = struct{}{}
	if _, ok := conn.(syscall.Conn); ok {
		return cutSysConn{c}
	}
	return c
}

// cutAll closes every connection dialed so far, which fails the calls in flight on them at
// once.
func (s *cutConns) cutAll() {
	s.mu.Lock()
	conns := make([]*cutConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// cutError marks the error of a call in flight when its node's breaker opened (cut).
func cutError(node string, err error) error {
	return fmt.Errorf("%w: %s (the call was in flight when it opened): %w", ErrBreakerOpen, node, err)
}

// wasCut reports whether err, the error of a call that started before the breaker's opening
// number gen, failed because that opening closed its connection.
func (b *Breaker) wasCut(gen uint64, err error) bool {
	return err != nil && b.opens.Load() != gen && errors.Is(err, net.ErrClosed)
}

// pausedThrough reports whether a call under ctx that started at start and has just failed
// outlived its deadline by more than its whole budget and more than minPauseGap: its deadline
// passed while this process was not running (a GC or VM pause, SIGSTOP), not because the node was silent. Such a
// failure says nothing of the node: the breaker does not count it.
func pausedThrough(ctx context.Context, start time.Time) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	late := time.Since(dl)
	return late > minPauseGap && late > dl.Sub(start)
}

// pausedMsg is the debug line of a failure pausedThrough discounts.
const pausedMsg = "redis breaker: a call whose deadline passed while the process was stopped is not counted"

// minPauseGap is the least lateness that pausedThrough reads as a pause of the process: a
// second, so that a client overrunning a deadline by itself (go-redis's retries of a refused
// dial sleep without looking at the context: 400ms past a 100ms deadline under -race) is not
// taken for one. Shorter pauses of the process are counted as the node's failures.
const minPauseGap = time.Second
