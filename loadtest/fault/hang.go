package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The hang faults: -chaos redis-hang stops the run's redis-server, -chaos db-hang its private
// PostgreSQL server (the postmaster and every backend), with SIGSTOP for -hang-for, then
// SIGCONT. Connections stay open and nothing answers: what a hung host or a full stop-the-world
// looks like to the storefronts, not a refused connection.

// The hang timeline of one strategy's run, from its start: the healthy window is
// [hangWarmUp, hangWarmUp+hangHealthy), the process is stopped hangGap after its end, and the hung window
// starts hangSettle after the stop (the breaker has had time to open) and ends at the SIGCONT.
const (
	hangWarmUp  = 500 * time.Millisecond
	hangHealthy = 2 * time.Second
	hangSettle  = 1500 * time.Millisecond
	// hangGap separates the healthy window from the stop: a purchase of the healthy window
	// must be answered before the stop to count, and few take longer than that.
	hangGap = 500 * time.Millisecond
	// hangAfter is how long the run goes on after the SIGCONT (locked sales must be back within
	// hangBackWithin).
	hangAfter      = 6 * time.Second
	hangBackWithin = 5 * time.Second
	// hangFailWithin bounds every answer of the hung window under --on-redis-down fail.
	hangFailWithin = time.Second
	// hangShedWithin bounds the p99 of the at_capacity answers while the database hangs.
	hangShedWithin = time.Second
)

// HangRunLength is how long a strategy's run under a hang of hangFor lasts by default: the
// warm-up, the healthy window, the gap before the stop, the hang, and the recovery.
func HangRunLength(hangFor time.Duration) time.Duration {
	return hangWarmUp + hangHealthy + hangGap + hangFor + hangAfter
}

// The processes a hang stops.
const (
	hangRedis    = "redis"
	hangPostgres = "postgres"
)

// hangRedisServer stops the run's redis-server for -hang-for (after the healthy window).
func (c *Chaos) hangRedisServer(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosRedisHang}
	if c.cluster.Redis == nil || c.cluster.Redis.PID == 0 {
		ev.Note = "-chaos redis-hang needs a redis-server child (redis-server on PATH), not miniredis"
		return ev
	}
	srv := c.cluster.Redis
	return c.hang(ctx, stop, start, ev, hangRedis, func(sig syscall.Signal) error { return srv.Signal(sig) })
}

// hangPostgresServer stops the run's private PostgreSQL server for -hang-for.
func (c *Chaos) hangPostgresServer(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	ev := &Event{Mode: ChaosDBHang}
	if c.cluster.Postgres == nil {
		ev.Note = "-chaos db-hang needs -db postgres"
		return ev
	}
	pid := c.cluster.Postgres.PID()
	ev = c.hang(ctx, stop, start, ev, hangPostgres, func(sig syscall.Signal) error { return signalTree(pid, sig) })
	if ev.Hang != nil {
		for _, in := range c.cluster.Instances {
			ev.Hang.logs = append(ev.Hang.logs, filepath.Join(c.cluster.Dir, fmt.Sprintf("instance-%d.log", in.Index)))
		}
	}
	return ev
}

// hang waits for the end of the healthy window, stops the process with signal(SIGSTOP) for
// c.hangFor (less when ctx ends), then continues it. It never leaves the process stopped.
func (c *Chaos) hang(ctx context.Context, stop <-chan struct{}, start time.Time, ev *Event, target string, signal func(syscall.Signal) error) *Event {
	if !c.wait(ctx, stop, time.Until(start.Add(hangWarmUp+hangHealthy+hangGap))) {
		ev.Note = "the run ended before the hang"
		return ev
	}
	if err := signal(syscall.SIGSTOP); err != nil {
		_ = signal(syscall.SIGCONT) // a partial stop (a backend gone meanwhile) is undone
		ev.Note = "SIGSTOP: " + err.Error()
		return ev
	}
	ev.Hang = &HangFigures{Target: target, Policy: c.onRedisDown}
	ev.Paused, ev.PausedAt = true, ev.mark(start, "%s stopped (SIGSTOP)", target)
	ev.FaultAt = ev.PausedAt
	ev.Hang.StoppedAt = ev.PausedAt
	t := time.NewTimer(c.hangFor)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	err := signal(syscall.SIGCONT)
	ev.ResumedAt = ev.mark(start, "%s continued (SIGCONT)", target)
	ev.Hang.ContinuedAt = ev.ResumedAt
	if err != nil {
		ev.Note = "SIGCONT: " + err.Error()
	}
	return ev
}

// signalTree sends sig to pid and to each of its children: a PostgreSQL backend runs in a
// session of its own, so the process group is not enough. SIGSTOP goes to the postmaster first
// (no backend is forked meanwhile), SIGCONT to it last.
func signalTree(pid int, sig syscall.Signal) error {
	if sig == syscall.SIGSTOP {
		if err := syscall.Kill(pid, sig); err != nil {
			return err
		}
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse after its closing paren.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			if err := syscall.Kill(child, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	if sig != syscall.SIGSTOP {
		errs = append(errs, syscall.Kill(pid, sig))
	}
	return errors.Join(errs...)
}
