package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// TopologyMix is TopologyProxied with the clock of TopologyClock: one redis-server whose clock
// the load test can step and which keeps a snapshot directory, reached by each instance through
// its own proxy (-chaos mix).
const TopologyMix = "mix"

// The fault kinds of -chaos mix.
const (
	mixPause         = "pause"                  // SIGSTOP an instance for 3x the lease
	mixKill          = "kill"                   // SIGKILL an instance, start it again on its port
	mixRedisEmpty    = "redis-restart-empty"    // SIGKILL redis-server, restart it without its snapshot
	mixRedisSnapshot = "redis-restart-snapshot" // SAVE, a lease of writes, SIGKILL, restart from the snapshot
	mixPartition     = "partition-flap"         // an instance's link to Redis cut and healed four times
	mixLatency       = "latency"                // 20-80ms each way on every link to Redis for 2x the lease
	mixClock         = "clock"                  // Redis's clock stepped 2x the lease forward while a holder works
	mixPostgres      = "postgres-restart"       // the private PostgreSQL stopped in immediate mode, started again
)

// mixKinds are the fault kinds of -chaos mix, in the order the reports list them; the last
// one only when the run uses the private PostgreSQL server (-db postgres).
var mixKinds = []string{mixPause, mixKill, mixRedisEmpty, mixRedisSnapshot, mixPartition, mixLatency, mixClock, mixPostgres}

// defaultMixGap is -mix-gap's default: the pause between two faults is drawn from [gap, 2*gap).
const defaultMixGap = time.Second

// errCutShort is a fault that the end of the run interrupted: undone early, not counted as fired.
var errCutShort = errors.New("cut short by the end of the run")

// MixSchedule is what -chaos mix fired during one strategy's run. The schedule goes round the
// kinds, each round in a new random order, so that every kind fires once before any fires
// twice; a kind never fired in full (Missed) fails the run.
type MixSchedule struct {
	Kinds  []string       `json:"kinds"`            // the kinds the run had to fire
	Fired  map[string]int `json:"fired"`            // faults brought and undone in full, per kind
	Failed map[string]int `json:"failed,omitempty"` // faults that could not be brought (the error is on the timeline), per kind
	Missed []string       `json:"missed,omitempty"` // kinds never fired in full: the run was too short for the schedule
	Rounds int            `json:"rounds"`           // rounds completed
	Faults []MixFault     `json:"faults"`           // every fault, in order
}

// MixFault is one fault of the schedule, its times in seconds since the strategy's run began.
type MixFault struct {
	Kind    string  `json:"kind"`
	Round   int     `json:"round"`
	At      float64 `json:"at_s"`    // when it began (0: it never did)
	End     float64 `json:"end_s"`   // when it was undone
	What    string  `json:"what"`    // its first step, as on the timeline
	Outcome string  `json:"outcome"` // "fired", "cut short by the end of the run", or why it could not be brought
}

// Complete reports whether every kind fired at least once.
func (s *MixSchedule) Complete() bool { return len(s.Missed) == 0 }

// summary is the schedule's last line on the timeline: the count per kind, and what was missed.
func (s *MixSchedule) summary() string {
	parts := make([]string, 0, len(s.Kinds))
	for _, k := range s.Kinds {
		parts = append(parts, fmt.Sprintf("%s×%d", k, s.Fired[k]))
	}
	line := fmt.Sprintf("fault schedule: %d fault(s) in %d full round(s): %s", len(s.Faults), s.Rounds, strings.Join(parts, " "))
	if s.Complete() {
		return line + "; every kind fired"
	}
	return line + "; MISSED " + strings.Join(s.Missed, ", ") + ": " + mixMissedHint
}

// mixMissedHint tells what to do when the schedule missed a kind.
const mixMissedHint = "the run ended before every kind fired (give a longer -duration or a shorter -mix-gap)"

// mixOrder returns the kinds of one round in a random order.
func mixOrder(rng *rand.Rand, kinds []string) []string {
	order := slices.Clone(kinds)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

// mixKindsOf returns the kinds the schedule must fire on cl.
func mixKindsOf(cl *Cluster) []string {
	if cl.Postgres != nil {
		return slices.Clone(mixKinds)
	}
	return slices.DeleteFunc(slices.Clone(mixKinds), func(k string) bool { return k == mixPostgres })
}

// mix brings one fault after another until the run ends, a random pause of [gap, 2*gap)
// before each, going round the kinds (mixKinds) in a random order per round; each fault is
// undone before the next. Every step is on the timeline, and the last line counts the faults
// per kind; the invariants and the history are checked at the end as in every run.
func (c *chaos) mix(ctx context.Context, stop <-chan struct{}, start time.Time, r chaosRun) *ChaosEvent {
	ev := &ChaosEvent{Mode: chaosMix}
	kinds := mixKindsOf(c.cluster)
	sched := &MixSchedule{Kinds: kinds, Fired: map[string]int{}, Failed: map[string]int{}}
	ev.Mix = sched
	rng := rand.New(rand.NewPCG(uint64(r.round)+1, uint64(r.hotID)))
	gap := c.mixGap
	if gap <= 0 {
		gap = defaultMixGap
	}
	m := &mixer{c: c, ctx: ctx, stop: stop, start: start, ev: ev, rng: rng, run: r}
schedule:
	for round := 0; ; round++ {
		for _, kind := range mixOrder(rng, kinds) {
			if !c.wait(ctx, stop, gap+time.Duration(rng.Int64N(int64(gap)))) {
				break schedule
			}
			f := MixFault{Kind: kind, Round: round}
			first := len(ev.Timeline)
			at, err := m.fire(kind)
			f.At, f.End = at, time.Since(start).Seconds()
			if len(ev.Timeline) > first {
				f.What = ev.Timeline[first].What
			}
			switch {
			case errors.Is(err, errCutShort):
				f.Outcome = errCutShort.Error()
				ev.mark(start, "%s %s", kind, errCutShort)
			case err != nil:
				f.Outcome = err.Error()
				sched.Failed[kind]++
				ev.mark(start, "%s could not be brought: %v", kind, err)
			default:
				f.Outcome = "fired"
				sched.Fired[kind]++
			}
			if at > 0 && ev.FaultAt == 0 {
				ev.FaultAt, ev.PausedAt = at, at
			}
			sched.Faults = append(sched.Faults, f)
			if errors.Is(err, errCutShort) {
				break schedule
			}
		}
		sched.Rounds = round + 1
		if sched.Rounds == m.c.mixRounds {
			close(r.rounds) // the run may end now (-mix-rounds)
		}
	}
	if r.rounds != nil && sched.Rounds < m.c.mixRounds {
		close(r.rounds)
	}
	for _, k := range kinds {
		if sched.Fired[k] == 0 {
			sched.Missed = append(sched.Missed, k)
		}
	}
	ev.ResumedAt = ev.mark(start, "%s", sched.summary())
	if len(sched.Faults) == 0 {
		ev.Note = "the run ended before the first fault"
	}
	return ev
}

// judgeMix fails a strategy's run whose fault schedule missed a kind.
func judgeMix(_ Config, res *StrategyResult, _ time.Time, _ []*purchase, _ bool) []string {
	switch {
	case res.Chaos == nil || res.Chaos.Mix == nil:
		return []string{"the fault schedule fired nothing: " + mixMissedHint}
	case !res.Chaos.Mix.Complete():
		return []string{fmt.Sprintf("the fault schedule missed %s: %s", strings.Join(res.Chaos.Mix.Missed, ", "), mixMissedHint)}
	}
	return nil
}

// mixer brings the faults of one strategy's run.
type mixer struct {
	c     *chaos
	ctx   context.Context
	stop  <-chan struct{}
	start time.Time
	ev    *ChaosEvent
	rng   *rand.Rand
	run   chaosRun
}

func (m *mixer) mark(format string, a ...any) float64 { return m.ev.mark(m.start, format, a...) }

// wait waits d; false when the run ends first.
func (m *mixer) wait(d time.Duration) bool { return m.c.wait(m.ctx, m.stop, d) }

// fire brings the fault kind and undoes it; it returns when the fault began.
func (m *mixer) fire(kind string) (float64, error) {
	switch kind {
	case mixPause:
		return m.pause()
	case mixKill:
		return m.kill()
	case mixRedisEmpty:
		return m.redisEmpty()
	case mixRedisSnapshot:
		return m.redisSnapshot()
	case mixPartition:
		return m.partitionFlap()
	case mixLatency:
		return m.latency()
	case mixClock:
		return m.clock()
	case mixPostgres:
		return m.postgres()
	}
	return 0, fmt.Errorf("unknown fault %q", kind)
}

// holder looks, for at most a lease (one pass for a strategy without a lock), for the instance
// that holds the hot item's lock.
func (m *mixer) holder() (storeapi.Holder, bool) {
	deadline := time.Now().Add(m.c.lease)
	for {
		var found storeapi.Holder
		ok := m.c.eachHolder(m.ctx, m.run.hotID, func(h storeapi.Holder) bool { found = h; return true })
		if ok || !m.run.strategy.TakesLock || time.Now().After(deadline) || !m.wait(5*time.Millisecond) {
			return found, ok
		}
	}
}

// target picks the instance a fault hits: the hot lock's holder when one is seen, else one at
// random. It returns its index and how the timeline names it.
func (m *mixer) target() (int, string) {
	if h, ok := m.holder(); ok {
		return h.Index, fmt.Sprintf("instance %d (pid %d, holding %s token %d)", h.Index, h.PID, h.Lock.Name, h.Lock.Token)
	}
	i := m.rng.IntN(len(m.c.cluster.Instances))
	return i, fmt.Sprintf("instance %d (pid %d)", i, m.c.cluster.Instances[i].PID())
}

// pause stops an instance (SIGSTOP) for 3x the lease: its lease runs out while it is stopped.
func (m *mixer) pause() (float64, error) {
	i, who := m.target()
	in := m.c.cluster.Instances[i]
	if err := in.Pause(); err != nil {
		return 0, err
	}
	at := m.mark("pause: %s stopped (SIGSTOP) for %s, 3x the lease", who, 3*m.c.lease)
	ok := m.wait(3 * m.c.lease)
	if err := in.Resume(); err != nil {
		return at, err
	}
	m.mark("pause: instance %d continued (SIGCONT)", i)
	if !ok {
		return at, errCutShort
	}
	return at, nil
}

// kill kills an instance (SIGKILL: it releases nothing) and starts it again half a lease later
// on the same port with the same flags; its clients meanwhile see refused connections.
func (m *mixer) kill() (float64, error) {
	i, who := m.target()
	down := m.c.lease / 2
	at := m.mark("kill: %s killed (SIGKILL); started again on its port after %s", who, down)
	in, err := m.c.cluster.RestartInstance(m.ctx, i, down)
	if err != nil {
		return at, err
	}
	m.mark("kill: instance %d running again (pid %d) and ready", i, in.PID())
	return at, nil
}

// redisEmpty kills redis-server and starts it again on its port without its snapshot: every
// lock and fencing counter is lost.
func (m *mixer) redisEmpty() (float64, error) {
	rs := m.c.cluster.Redis
	at := m.mark("redis-restart-empty: redis-server (pid %d) killed (SIGKILL)", rs.PID)
	if err := rs.RestartEmpty(); err != nil {
		return at, err
	}
	m.mark("redis-restart-empty: redis-server running again on its port (pid %d), its snapshot deleted: every lock and fencing counter lost", rs.PID)
	return at, nil
}

// redisSnapshot takes a snapshot (SAVE), lets the instances write for one more lease, kills
// redis-server and starts it again from the snapshot: that lease's writes are lost, the
// fencing counters go back to where the SAVE left them, and the locks held at the SAVE come
// back until their TTL ends.
func (m *mixer) redisSnapshot() (float64, error) {
	rs := m.c.cluster.Redis
	var keys int64
	err := m.redisCall(func(ctx context.Context) error {
		if err := m.c.rdb.Save(ctx).Err(); err != nil {
			return fmt.Errorf("SAVE: %w", err)
		}
		keys, _ = m.c.rdb.DBSize(ctx).Result()
		return nil
	})
	if err != nil {
		return 0, err
	}
	at := m.mark("redis-restart-snapshot: SAVE wrote redis-server's snapshot (%d keys); the instances write on for %s, then the kill", keys, m.c.lease)
	if !m.wait(m.c.lease) {
		return at, errCutShort
	}
	m.mark("redis-restart-snapshot: redis-server (pid %d) killed (SIGKILL)", rs.PID)
	if err := rs.RestartFromSnapshot(); err != nil {
		return at, err
	}
	var after int64
	_ = m.redisCall(func(ctx context.Context) (err error) { after, err = m.c.rdb.DBSize(ctx).Result(); return err })
	m.mark("redis-restart-snapshot: redis-server running again on its port (pid %d) from the snapshot (%d keys): the writes since the SAVE lost, "+
		"the fencing counters back where it left them, the locks held then held again until their TTL", rs.PID, after)
	return at, nil
}

// redisCall runs fn on the load test's own Redis client, a second time if the first fails (a
// connection of the client may be one to the redis-server a restart killed).
func (m *mixer) redisCall(fn func(ctx context.Context) error) error {
	var err error
	for try := 0; try < 2; try++ {
		cctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
		err = fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// partitionFlap cuts an instance's link to Redis (a black hole: every byte dropped, nothing
// refused) and heals it, four times: cuts of a quarter to one and a half leases, heals of 50ms
// to half a lease in between.
func (m *mixer) partitionFlap() (float64, error) {
	const cuts = 4
	i, who := m.target()
	link := m.c.cluster.Links[i]
	lease := m.c.lease
	var at float64
	var steps []string
	for k := 0; k < cuts; k++ {
		cut := lease/4 + time.Duration(m.rng.Int64N(int64(5*lease/4)))
		if err := link.Blackhole(); err != nil {
			_ = link.Heal()
			return at, err
		}
		if k == 0 {
			at = m.mark("partition-flap: %s's link to Redis black-holed and healed %d times", who, cuts)
		}
		ok := m.wait(cut)
		if err := link.Heal(); err != nil {
			return at, err
		}
		steps = append(steps, "cut "+cut.Round(time.Millisecond).String())
		if ok && k < cuts-1 {
			heal := 50*time.Millisecond + time.Duration(m.rng.Int64N(int64(lease/2)))
			steps = append(steps, "healed "+heal.Round(time.Millisecond).String())
			ok = m.wait(heal)
		}
		if !ok {
			m.mark("partition-flap: instance %d's link healed (%s)", i, strings.Join(steps, ", "))
			return at, errCutShort
		}
	}
	m.mark("partition-flap: instance %d's link healed for good (%s)", i, strings.Join(steps, ", "))
	return at, nil
}

// latency slows every link to Redis by 20 to 80ms each way for 2x the lease.
func (m *mixer) latency() (float64, error) {
	d := time.Duration(20+m.rng.IntN(61)) * time.Millisecond
	links := m.c.cluster.Links
	healAll := func() {
		for _, l := range links {
			_ = l.Heal()
		}
	}
	for _, l := range links {
		if err := l.Latency(d); err != nil {
			healAll()
			return 0, err
		}
	}
	at := m.mark("latency: %s each way on every link to Redis for %s", d, 2*m.c.lease)
	ok := m.wait(2 * m.c.lease)
	healAll()
	m.mark("latency: removed")
	if !ok {
		return at, errCutShort
	}
	return at, nil
}

// clock steps Redis's clock forward by twice the lease (the shim reads its offset from a file
// the load test rewrites), once a holder of the hot lock is seen working when the strategy
// takes a lock: its key ends at once while it believes most of its lease is left.
func (m *mixer) clock() (float64, error) {
	step := 2 * m.c.lease
	who := "no holder of the hot lock seen"
	if h, ok := m.holder(); ok {
		who = fmt.Sprintf("instance %d holds %s token %d", h.Index, h.Lock.Name, h.Lock.Token)
	}
	offset, err := m.c.cluster.Clock.Jump(step)
	if err != nil {
		return 0, err
	}
	return m.mark("clock: %s; Redis's clock stepped %s forward (now +%s): every lease ends at once", who, step, offset), nil
}

// postgres stops the private PostgreSQL server in immediate mode (every backend exits at once,
// as in a crash) and starts it again half a lease later on the same port and data directory,
// after crash recovery.
func (m *mixer) postgres() (float64, error) {
	pg := m.c.cluster.Postgres
	at := m.mark("postgres-restart: PostgreSQL (pid %d) stopped in immediate mode (every backend gone at once, as in a crash)", pg.PID())
	pg.Kill()
	t := time.NewTimer(m.c.lease / 2)
	select { // no early return: the server is started again whatever happens
	case <-t.C:
	case <-m.ctx.Done():
		t.Stop()
	}
	if err := pg.Restart(); err != nil {
		return at, err
	}
	m.mark("postgres-restart: PostgreSQL running again on its port and data directory (pid %d), after crash recovery", pg.PID())
	return at, nil
}
