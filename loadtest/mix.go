package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/redisproc"
)

// TopologyMix is TopologyProxied with the clock of TopologyClock: one redis-server whose clock
// the load test can step, reached by each instance through its own proxy (-chaos mix).
const TopologyMix = "mix"

// mixFaults are the faults -chaos mix draws from, by name.
var mixFaults = []string{"pause", "partition", "latency", "clock", "redis-restart"}

// mix brings one fault every 1.5 to 3 seconds, drawn from mixFaults, each undone before the
// next: SIGSTOP of an instance for 3x the lease, its link to Redis black-holed for 1.5x the
// lease, 50ms each way on every link for two seconds, Redis's clock stepped forward by twice the
// lease, redis-server killed (SIGKILL) and restarted empty on the same port (locks and fencing
// counters lost). Every fault is on the timeline; the invariants and the history are checked
// at the end as in every run.
func (c *chaos) mix(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosMix}
	rng := rand.New(rand.NewPCG(uint64(r.round)+1, uint64(r.hotID)))
	counts := map[string]int{}
	for {
		if !c.wait(ctx, stop, 1500*time.Millisecond+time.Duration(rng.IntN(1500))*time.Millisecond) {
			break
		}
		name := mixFaults[rng.IntN(len(mixFaults))]
		at, err := c.mixFault(ctx, stop, ev, start, name, rng)
		if err != nil {
			ev.mark(start, "%s: %v", name, err)
			continue
		}
		counts[name]++
		if ev.FaultAt == 0 {
			ev.FaultAt, ev.PausedAt = at, at
		}
	}
	var parts []string
	for _, f := range mixFaults {
		if counts[f] > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", f, counts[f]))
		}
	}
	ev.ResumedAt = ev.mark(start, "faults: %s", strings.Join(parts, " "))
	if len(parts) == 0 {
		ev.Note = "the run ended before the first fault"
	}
	return ev
}

// mixFault brings one fault and undoes it; it returns when the fault began.
func (c *chaos) mixFault(ctx context.Context, stop <-chan struct{}, ev *ChaosEvent, start time.Time, name string, rng *rand.Rand) (float64, error) {
	i := rng.IntN(len(c.cluster.Instances))
	in := c.cluster.Instances[i]
	switch name {
	case "pause":
		if err := in.Pause(); err != nil {
			return 0, err
		}
		at := ev.mark(start, "instance %d (pid %d) paused (SIGSTOP) for %s", i, in.PID(), 3*c.lease)
		c.wait(ctx, stop, 3*c.lease)
		if err := in.Resume(); err != nil {
			return at, err
		}
		ev.mark(start, "instance %d resumed", i)
		return at, nil
	case "partition":
		l := c.cluster.Links[i]
		if err := l.Blackhole(); err != nil {
			return 0, err
		}
		at := ev.mark(start, "instance %d's link to Redis black-holed for %s", i, 3*c.lease/2)
		c.wait(ctx, stop, 3*c.lease/2)
		if err := l.Heal(); err != nil {
			return at, err
		}
		ev.mark(start, "instance %d's link healed", i)
		return at, nil
	case "latency":
		at := ev.mark(start, "50ms each way on every link to Redis for 2s")
		for _, l := range c.cluster.Links {
			if err := l.Latency(50 * time.Millisecond); err != nil {
				return at, err
			}
		}
		c.wait(ctx, stop, 2*time.Second)
		for _, l := range c.cluster.Links {
			_ = l.Heal()
		}
		ev.mark(start, "latency removed")
		return at, nil
	case "clock":
		offset, err := c.cluster.Clock.Jump(2 * c.lease)
		if err != nil {
			return 0, err
		}
		return ev.mark(start, "Redis's clock stepped %s forward (now +%s): every lease ends at once", 2*c.lease, offset), nil
	case "redis-restart":
		at := ev.mark(start, "redis-server (pid %d) killed (SIGKILL)", c.cluster.Redis.PID)
		if err := c.cluster.Redis.RestartEmpty(); err != nil {
			return at, err
		}
		ev.mark(start, "redis-server restarted empty (pid %d): locks and fencing counters lost", c.cluster.Redis.PID)
		return at, nil
	}
	return 0, fmt.Errorf("unknown fault %q", name)
}

// RestartEmpty kills the redis-server (SIGKILL) and starts a new one on the same port with
// nothing loaded (and the same environment: a shimmed clock keeps its offset).
func (s *redisServer) RestartEmpty() error {
	if s.srv == nil || s.srv.Kind != redisproc.KindChild {
		return fmt.Errorf("restart: Redis is not a redis-server")
	}
	s.srv.Kill()
	_, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	opts := s.opts
	opts.Dir = "" // a fresh temporary directory: no snapshot to load
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the old socket may linger briefly
		var srv *redisproc.Server
		if srv, err = redisproc.StartChildOpts(s.path, p, opts); err == nil {
			s.srv, s.PID = srv, srv.PID
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("restart redis-server on %s: %w", s.Addr, err)
}
