package fault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/cluster"
)

// The faults of -chaos mix: each kind one Fault value (mix.go schedules them), one function
// per kind on the Injection.

// mixKind is one kind of fault of the mix schedule.
type mixKind struct {
	name string
	// needs tells whether the cluster has what the kind needs beyond what the mix mode's
	// topology (cluster.TopologyMix: a redis-server with a snapshot directory and a clock
	// that can be stepped, behind one proxy per instance) gives every run; nil: nothing more.
	needs func(cl *cluster.Cluster) error
	fire  func(m *Injection) (float64, error)
}

func (k mixKind) Name() string { return k.name }

func (k mixKind) Available(cl *cluster.Cluster) error {
	if k.needs == nil {
		return nil
	}
	return k.needs(cl)
}

func (k mixKind) Inject(x *Injection) (float64, error) { return k.fire(x) }

// mixFaults are the faults of -chaos mix, in the order the reports list them; the last one
// only when the run uses the private PostgreSQL server (-db postgres).
var mixFaults = []Fault{
	mixKind{name: mixPause, fire: (*Injection).pause},
	mixKind{name: mixKill, fire: (*Injection).kill},
	mixKind{name: mixRedisEmpty, fire: (*Injection).redisEmpty},
	mixKind{name: mixRedisSnapshot, fire: (*Injection).redisSnapshot},
	mixKind{name: mixPartition, fire: (*Injection).partitionFlap},
	mixKind{name: mixLatency, fire: (*Injection).latency},
	mixKind{name: mixClock, fire: (*Injection).clock},
	mixKind{name: mixPostgres, fire: (*Injection).postgres, needs: func(cl *cluster.Cluster) error {
		if cl.Postgres == nil {
			return errors.New("postgres-restart needs the private PostgreSQL server (-db postgres)")
		}
		return nil
	}},
}

func (m *Injection) mark(format string, a ...any) float64 { return m.ev.mark(m.start, format, a...) }

// wait waits d; false when the run ends first.
func (m *Injection) wait(d time.Duration) bool { return m.c.wait(m.ctx, m.stop, d) }

// holder looks, for at most a lease (one pass for a strategy without a lock), for the instance
// that holds the hot item's lock.
func (m *Injection) holder() (storeapi.Holder, bool) {
	deadline := time.Now().Add(m.c.lease)
	for {
		var found storeapi.Holder
		ok := m.c.eachHolder(m.ctx, m.run.HotID, func(h storeapi.Holder) bool { found = h; return true })
		if ok || !m.run.Strategy.TakesLock || time.Now().After(deadline) || !m.wait(5*time.Millisecond) {
			return found, ok
		}
	}
}

// target picks the instance a fault hits: the hot lock's holder when one is seen, else one at
// random. It returns its index and how the timeline names it.
func (m *Injection) target() (int, string) {
	if h, ok := m.holder(); ok {
		return h.Index, fmt.Sprintf("instance %d (pid %d, holding %s token %d)", h.Index, h.PID, h.Lock.Name, h.Lock.Token)
	}
	i := m.rng.IntN(len(m.c.cluster.Instances))
	return i, fmt.Sprintf("instance %d (pid %d)", i, m.c.cluster.Instances[i].PID())
}

// pause stops an instance (SIGSTOP) for 3x the lease: its lease runs out while it is stopped.
func (m *Injection) pause() (float64, error) {
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
		return at, ErrCutShort
	}
	return at, nil
}

// kill kills an instance (SIGKILL: it releases nothing) and starts it again half a lease later
// on the same port with the same flags; its clients meanwhile see refused connections.
func (m *Injection) kill() (float64, error) {
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
func (m *Injection) redisEmpty() (float64, error) {
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
func (m *Injection) redisSnapshot() (float64, error) {
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
		return at, ErrCutShort
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
func (m *Injection) redisCall(fn func(ctx context.Context) error) error {
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
func (m *Injection) partitionFlap() (float64, error) {
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
			return at, ErrCutShort
		}
	}
	m.mark("partition-flap: instance %d's link healed for good (%s)", i, strings.Join(steps, ", "))
	return at, nil
}

// latency slows every link to Redis by 20 to 80ms each way for 2x the lease.
func (m *Injection) latency() (float64, error) {
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
		return at, ErrCutShort
	}
	return at, nil
}

// clock steps Redis's clock forward by twice the lease (the shim reads its offset from a file
// the load test rewrites), once a holder of the hot lock is seen working when the strategy
// takes a lock: its key ends at once while it believes most of its lease is left.
func (m *Injection) clock() (float64, error) {
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
func (m *Injection) postgres() (float64, error) {
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
