package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrBreakerOpen is the error of a Redis call refused at once because its node's breaker is
// open (the node stopped answering). Like any Redis failure it reads as "unavailable"; nothing
// was sent.
var ErrBreakerOpen = errors.New("locking: circuit breaker open: the Redis node stopped answering")

// BreakerState is the state of one node's breaker.
type BreakerState int32

// The states of a breaker. The values are those of the storefront's gauge.
const (
	// BreakerClosed: calls go through; consecutive failures are counted.
	BreakerClosed BreakerState = 0
	// BreakerHalfOpen: open, with one probe in flight.
	BreakerHalfOpen BreakerState = 1
	// BreakerOpen: every call fails at once with ErrBreakerOpen (a clean-up is owed).
	BreakerOpen BreakerState = 2
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return fmt.Sprintf("BreakerState(%d)", int32(s))
}

// Defaults of BreakerOptions.
const (
	DefaultBreakerFailures      = 3
	DefaultBreakerProbeInterval = 250 * time.Millisecond
	DefaultBreakerProbeTimeout  = 250 * time.Millisecond
)

// BreakerOptions configure Breakers. A nil *BreakerOptions, and every zero field, means the
// default.
type BreakerOptions struct {
	// Failures is how many consecutive failed calls (a timeout, a network error, no
	// connection to be had: anything but a reply) open a node's breaker. Default 3.
	Failures int
	// ProbeInterval is how long an open breaker waits before each probe of its node.
	// Default 250ms.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe (a PING). Default 250ms.
	ProbeTimeout time.Duration
	// Logger receives one line per transition: open (warn), closed (info), and the probe
	// cycles half-open and back to open (debug). Default: discard.
	Logger *slog.Logger
	// OnState, if set, is called after every transition of a node's breaker, with its new
	// state (metrics). It must be quick.
	OnState func(node string, st BreakerState)
}

// Breakers are the circuit breakers of one process, one per Redis node (a server, the
// master behind a Sentinel set, each master of a Cluster), shared by every client of the
// process that talks to that node. A node that stops answering (a hung Redis: sockets open,
// nothing answers) is found out once, by Failures consecutive failed calls, instead of by
// every purchase, call timeout by call timeout: its breaker opens, and every call to it fails
// at once with ErrBreakerOpen. While open, one probe at a time (a PING, from a goroutine of
// the breaker, never a caller's call) tests the node every ProbeInterval; the first answer
// closes the breaker.
//
// A breaker is a go-redis hook (Watch, WatchCluster install it), not a go-redis
// Options.Limiter: a hook sees the call's context, so that it can tell its own probes from
// the callers' calls. The clean-up calls of this package (the release of a held lock, the undo
// of an attempt whose reply was lost) are refused at once too: the opening cut every
// connection to the node, and a new one's handshake would only time out, with the holder's
// caller waiting for it. Each refused clean-up is owed instead (debts.go) and paid when the
// breaker closes, or before this process's next attempt on the key, so that the lock is free
// then instead of being held by nobody until its lease ends.
//
// A Client, Redlock or Semaphore whose Options.Breakers is set wakes its waiters when one of
// the breakers opens, so that a waiter does not sleep on a release message that a hung node
// will never send: it tries again, and fails at once.
type Breakers struct {
	failures      int
	probeInterval time.Duration
	probeTimeout  time.Duration
	log           *slog.Logger
	onState       func(string, BreakerState)

	ctx    context.Context // cancelled by Close: ends the probes
	cancel context.CancelFunc
	wg     sync.WaitGroup // the probe goroutines

	mu       sync.Mutex
	nodes    []*Breaker
	onClosed map[*Client]func() // run by a probe that closed a breaker: Clients pay their debts
	open     int                // breakers not closed
	opened   chan struct{}      // closed at the next transition to open, then replaced
	closed   bool
}

// NewBreakers returns an empty set of breakers. Close stops their probes.
func NewBreakers(opts *BreakerOptions) *Breakers {
	if opts == nil {
		opts = &BreakerOptions{}
	}
	s := &Breakers{
		failures:      opts.Failures,
		probeInterval: opts.ProbeInterval,
		probeTimeout:  opts.ProbeTimeout,
		log:           opts.Logger,
		onState:       opts.OnState,
		opened:        make(chan struct{}),
	}
	if s.failures <= 0 {
		s.failures = DefaultBreakerFailures
	}
	if s.probeInterval <= 0 {
		s.probeInterval = DefaultBreakerProbeInterval
	}
	if s.probeTimeout <= 0 {
		s.probeTimeout = DefaultBreakerProbeTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Watch gives the node named node (its address, as logged and shown) a breaker, installed as
// a hook of rdb (a *redis.Client or a failover client: one node), and returns it. On a nil
// set it does nothing and returns nil.
func (s *Breakers) Watch(node string, rdb redis.UniversalClient) *Breaker {
	if s == nil {
		return nil
	}
	b := s.add(node, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	rdb.AddHook(b)
	return b
}

// WatchCluster makes every node client the cluster client built from o creates get a breaker
// of its own, named by the node's address: an open master fails the calls for its slots at
// once while the other masters keep answering. Call it before redis.NewClusterClient(o). It
// keeps a NewClient o already has. On a nil set it does nothing.
func (s *Breakers) WatchCluster(o *redis.ClusterOptions) {
	if s == nil {
		return
	}
	newClient := o.NewClient
	if newClient == nil {
		newClient = redis.NewClient
	}
	o.NewClient = func(opt *redis.Options) *redis.Client {
		c := newClient(opt)
		s.Watch(opt.Addr, c)
		return c
	}
}

func (s *Breakers) add(node string, probe func(context.Context) error) *Breaker {
	b := &Breaker{set: s, node: node, probe: probe}
	s.mu.Lock()
	s.nodes = append(s.nodes, b)
	s.mu.Unlock()
	return b
}

// States returns the state of every breaker, by node, in the order they were added (a
// cluster node that was added twice, by two clients, shows its last breaker).
func (s *Breakers) States() map[string]BreakerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]BreakerState, len(s.nodes))
	for _, b := range s.nodes {
		m[b.node] = b.state
	}
	return m
}

// Close stops the probes and waits for them. Breakers stay as they are: an open one keeps
// refusing calls. Close is safe to call more than once and always returns nil.
func (s *Breakers) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// watchClient makes c pay its clean-up debts (debts.go) when a breaker closes, so that a key
// held by an attempt given up during the hang is freed even if c never tries that key again.
func (s *Breakers) watchClient(c *Client) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onClosed == nil {
		s.onClosed = make(map[*Client]func())
	}
	s.onClosed[c] = c.settleAll
}

// unwatchClient undoes watchClient (Client.Close).
func (s *Breakers) unwatchClient(c *Client) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.onClosed, c)
}

// closedHooks runs the onClosed functions, on the probe goroutine that closed a breaker.
func (s *Breakers) closedHooks() {
	s.mu.Lock()
	fs := make([]func(), 0, len(s.onClosed))
	for _, f := range s.onClosed {
		fs = append(fs, f)
	}
	s.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// wake returns a channel closed at the next transition of a breaker to open, and whether one
// is open now. A nil set never wakes anyone.
func (s *Breakers) wake() (<-chan struct{}, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened, s.open > 0
}

// Breaker is the circuit breaker of one Redis node (Breakers). It implements redis.Hook.
type Breaker struct {
	set   *Breakers
	node  string
	probe func(context.Context) error

	opens atomic.Uint64 // transitions to open so far (cut.go)
	conns cutConns      // the connections its node client dialed (cut.go)

	// guarded by set.mu
	state    BreakerState
	failures int // consecutive, while closed
}

// Node returns the name the breaker was given.
func (b *Breaker) Node() string { return b.node }

// State returns the breaker's state.
func (b *Breaker) State() BreakerState {
	b.set.mu.Lock()
	defer b.set.mu.Unlock()
	return b.state
}

// probeKey marks the context of a breaker's probe, the one call an open breaker lets through.
type probeKey struct{}

// allow decides whether a call under ctx goes to the node.
func (b *Breaker) allow(ctx context.Context) error {
	if ctx.Value(probeKey{}) != nil {
		return nil
	}
	b.set.mu.Lock()
	st := b.state
	b.set.mu.Unlock()
	if st != BreakerClosed {
		return fmt.Errorf("%w: %s", ErrBreakerOpen, b.node)
	}
	return nil
}

// report counts the outcome of a call that went to the node, sent at start. A failure whose
// deadline passed while the process itself was stopped is not counted (pausedThrough).
func (b *Breaker) report(ctx context.Context, err error, start time.Time) {
	if ctx.Value(probeKey{}) != nil {
		return // the prober decides
	}
	o := failed(ctx, err)
	if o == outcomeFailed && pausedThrough(ctx, start) {
		b.set.log.Debug(pausedMsg, "node", b.node, "err", err)
		o = outcomeNeutral
	}
	switch o {
	case outcomeAnswered:
		b.set.mu.Lock()
		b.failures = 0
		b.set.mu.Unlock()
	case outcomeFailed:
		b.set.mu.Lock()
		if b.state == BreakerClosed {
			b.failures++
			if b.failures >= b.set.failures {
				b.openLocked(err)
			}
		}
		b.set.mu.Unlock()
	}
}

// openLocked opens a closed breaker and starts its prober.
func (b *Breaker) openLocked(cause error) {
	s := b.set
	b.setLocked(BreakerOpen)
	b.failures = 0
	b.opens.Add(1)
	b.conns.cutAll() // the calls in flight fail at once (cut.go)
	s.open++
	close(s.opened)
	s.opened = make(chan struct{})
	s.log.Warn("redis breaker open: calls to the node fail at once until a probe answers",
		"node", b.node, "failures", s.failures, "err", cause)
	if s.closed {
		return
	}
	s.wg.Add(1)
	go b.probeLoop() // owner: the Breakers, whose Close stops and waits for it
}

func (b *Breaker) setLocked(st BreakerState) {
	b.state = st
	if f := b.set.onState; f != nil {
		f(b.node, st)
	}
}

// probeLoop probes the node every ProbeInterval, one probe at a time, until one answers (the
// breaker closes) or the set is closed.
func (b *Breaker) probeLoop() {
	s := b.set
	defer s.wg.Done()
	t := time.NewTimer(s.probeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		b.setLocked(BreakerHalfOpen)
		s.mu.Unlock()
		s.log.Debug("redis breaker half-open: probing the node", "node", b.node)
		ctx, cancel := context.WithTimeout(context.WithValue(s.ctx, probeKey{}, true), s.probeTimeout)
		err := b.probe(ctx)
		cancel()
		s.mu.Lock()
		if err == nil {
			b.setLocked(BreakerClosed)
			s.open--
			s.mu.Unlock()
			s.log.Info("redis breaker closed: the node answers again", "node", b.node)
			s.closedHooks()
			return
		}
		b.setLocked(BreakerOpen)
		s.mu.Unlock()
		s.log.Debug("redis breaker open again: the probe failed", "node", b.node, "err", err)
		t.Reset(s.probeInterval)
	}
}

type outcome int

const (
	outcomeAnswered outcome = iota // a reply came (an error reply too)
	outcomeFailed                  // the node did not answer
	outcomeNeutral                 // says nothing of the node (the caller gave up, the client closed)
)

// failed classifies the outcome of a call under ctx that returned err: a timeout, a network
// error, no connection to be had (pool timeout), EOF or a reset are the node's failures.
func failed(ctx context.Context, err error) outcome {
	var re redis.Error
	switch {
	case err == nil, errors.As(err, &re):
		return outcomeAnswered
	case errors.Is(err, redis.ErrClosed), errors.Is(err, ErrBreakerOpen):
		return outcomeNeutral
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return outcomeNeutral
	}
	return outcomeFailed
}

// DialHook implements redis.Hook: dials go through (a refused dial fails the call, which is
// counted there); the breaker keeps each connection, to cut it when it opens (cut.go).
func (b *Breaker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return b.conns.add(conn), nil
	}
}

// ProcessHook implements redis.Hook.
func (b *Breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := b.allow(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		gen, start := b.opens.Load(), time.Now()
		err := next(ctx, cmd)
		if b.wasCut(gen, err) {
			err = cutError(b.node, err)
			cmd.SetErr(err)
		}
		b.report(ctx, err, start)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (b *Breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := b.allow(ctx); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		gen, start := b.opens.Load(), time.Now()
		err := next(ctx, cmds)
		if b.wasCut(gen, err) {
			err = cutError(b.node, err)
			for _, cmd := range cmds {
				if cmd.Err() != nil {
					cmd.SetErr(cutError(b.node, cmd.Err()))
				}
			}
		}
		b.report(ctx, err, start)
		return err
	}
}
