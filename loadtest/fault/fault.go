// Package fault is what the load test breaks during a strategy's run: every fault one value of
// the Fault interface, the -chaos modes one table (modes.go) saying what each needs of the
// cluster and which strategy classes stay SAFE under it, and -chaos mix a schedule over its kinds.
package fault

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/cluster"
	"github.com/stockguard/stockguard/loadtest/config"
)

// A Fault is one fault the load test can bring to a running cluster. The fault of each -chaos
// mode (modes.go) is one value, and so is each kind of fault of the -chaos mix schedule
// (mixkinds.go), which schedules those values (mix.go).
type Fault interface {
	// Name is the fault's -chaos name, or its kind in the mix schedule.
	Name() string
	// Available tells whether the cluster has what the fault needs: nil when it has.
	Available(cl *cluster.Cluster) error
	// Inject brings the fault during a strategy's run and undoes it before it returns, each
	// step on the timeline of the run's event. It returns when the fault began (seconds since
	// the run began; 0: it never did), or why it could not be brought (ErrCutShort: the end of
	// the run cut it short). The fault of a -chaos mode notes on the event what went wrong.
	Inject(x *Injection) (float64, error)
}

// Injection is one fault brought to one strategy's run: what a Fault's Inject works with.
type Injection struct {
	c     *Chaos          // the cluster and the settings of the faults
	ctx   context.Context // ends with the load test
	stop  <-chan struct{} // closed when the run ends
	start time.Time       // when the run began
	ev    *Event          // the run's event (nil until a -chaos mode's fault made it)
	rng   *rand.Rand      // the draws of the mix schedule (nil otherwise)
	run   Target          // the run
}

// modeFault is the fault of a -chaos mode: inject brings it and returns its event.
type modeFault struct {
	name     string
	topology string // the Redis topology it needs (cluster.Config.Redis)
	inject   func(c *Chaos, ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event
}

func (f modeFault) Name() string { return f.name }

func (f modeFault) Available(cl *cluster.Cluster) error {
	return checkTopology(f.name, f.topology, cl)
}

func (f modeFault) Inject(x *Injection) (float64, error) {
	x.ev = f.inject(x.c, x.ctx, x.stop, x.start, x.run)
	return x.ev.FaultAt, nil
}

// Outcome is what a mode's Judge reads of a strategy's run besides its purchases.
type Outcome struct {
	Event        *Event // the run's fault (nil: none was brought)
	Route        string // config.RouteRoundRobin or config.RouteItem
	Instances    int
	Oversold     int  // units oversold
	ExpectedSafe bool // the strategy's class is expected SAFE under the mode
}

// Chaos brings the fault of a chaos mode (modes.go) to the instances of a self-contained
// cluster during each strategy's run.
type Chaos struct {
	mode    Mode
	cluster *cluster.Cluster
	apis    []*client.API
	rdb     *redis.Client // the Redis of the locks (pause, partition); nil for failover
	lease   time.Duration
	// -chaos redis-hang, db-hang: how long the process stays stopped; the instances' --on-redis-down
	hangFor     time.Duration
	onRedisDown string
	// -chaos mix: the pause between two faults is drawn from [mixGap, 2*mixGap)
	mixGap time.Duration
	// -chaos mix: > 0 holds the run until that many full rounds fired (Target.Rounds)
	mixRounds int
	// -chaos mix: the kinds left out of the schedule (-mix-skip)
	mixSkip []string
	// -chaos failover: the instances' --lock-replicas (failover.go)
	lockReplicas int
	// -chaos kill: the kills of the hot lock's holder per strategy's run (kill.go)
	kills int
}

// Target is the strategy's run a fault is brought to.
type Target struct {
	Strategy storeapi.Strategy // as the server describes it
	HotID    int64             // the hot item
	Round    int               // the run's number
	// Rounds, when not nil, is closed by -chaos kill once its kills are done, and by -chaos
	// mix once cfg.MixRounds full rounds fired (or
	// the schedule ended): the run goes on until then.
	Rounds chan struct{}
}

// NewChaos returns what brings mode's fault to the instances of cl (reached through apis),
// with the settings of cfg. Close releases it.
func NewChaos(mode Mode, cl *cluster.Cluster, apis []*client.API, cfg config.Config) *Chaos {
	c := &Chaos{mode: mode, cluster: cl, apis: apis, lease: cfg.Lease, hangFor: cfg.HangFor, onRedisDown: cfg.OnRedisDown,
		mixGap: cfg.MixGap, mixRounds: cfg.MixRounds, mixSkip: cfg.MixSkip, lockReplicas: cfg.LockReplicas, kills: cfg.Kills}
	if cl.Redis != nil {
		c.rdb = cl.Redis.Client()
	}
	return c
}

// Close closes the Redis client of the faults.
func (c *Chaos) Close() {
	if c.rdb != nil {
		_ = c.rdb.Close()
	}
}

// Mode returns the chaos mode whose fault c brings.
func (c *Chaos) Mode() Mode { return c.mode }

// WaitsForRounds reports whether a run goes on until the mix schedule fired -mix-rounds full
// rounds, or -chaos kill its -kills (Target.Rounds).
func (c *Chaos) WaitsForRounds() bool {
	return c.mode.Name == ChaosMix && c.mixRounds > 0 || c.mode.Name == ChaosKill
}

// Bring waits a little into the run (200 ms; 20 ms for a strategy that takes a lock), then
// brings the mode's fault. It returns early, without a fault, when stop closes first. It never
// leaves a process stopped.
func (c *Chaos) Bring(ctx context.Context, stop <-chan struct{}, start time.Time, r Target) *Event {
	// A lock strategy is looked at from 20 ms in: lock+guard's holds sell to every buyer
	// waiting for them, so the hot item may be sold out, and its lock free for good, well
	// before 200 ms.
	first := 200 * time.Millisecond
	if r.Strategy.TakesLock {
		first = 20 * time.Millisecond
	}
	if !c.wait(ctx, stop, first) {
		return &Event{Mode: c.mode.Name, Note: "the run ended before the fault"}
	}
	x := &Injection{c: c, ctx: ctx, stop: stop, start: start, run: r}
	_, _ = c.mode.Fault.Inject(x) // a mode's fault notes on its event what went wrong
	return x.ev
}

// wait waits d; false when stop closes or ctx ends first.
func (c *Chaos) wait(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// holders returns the instances of the cluster that hold item itemID's lock, in order; an
// answer from another process than the instance's own (a port taken over) is left out.
func (c *Chaos) holders(ctx context.Context, itemID int64) []storeapi.Holder {
	var out []storeapi.Holder
	c.eachHolder(ctx, itemID, func(h storeapi.Holder) bool {
		out = append(out, h)
		return false
	})
	return out
}

// eachHolder asks the instances one after the other which holds item itemID's lock, and calls
// fn on each holder as soon as it answered (a fault lands while the holder is still where it
// was seen), until fn returns true; it reports whether one did.
func (c *Chaos) eachHolder(ctx context.Context, itemID int64, fn func(storeapi.Holder) bool) bool {
	for i, in := range c.cluster.Instances {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		h, ok := storeapi.FindHolder(cctx, c.apis[0].HC, []string{in.URL}, itemID)
		cancel()
		if !ok || h.PID != in.PID() {
			continue
		}
		h.Index = i
		if fn(h) {
			return true
		}
	}
	return false
}

// stillHeld checks on rdb that the lock is still held as l: no one took it after l's holder.
// Called once the holder is frozen (cluster.Instance.Pause), it settles first
// (storeapi.Settle), so that a release the holder wrote before it stopped has run. Without it
// a pause run once confirmed a holder whose release landed just after the check
// (TestPauseLanesReport: the "paused holder" had written and released, and had nothing stale
// left to show).
func (c *Chaos) stillHeld(ctx context.Context, rdb *redis.Client, l storeapi.HeldLock) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return storeapi.Settle(cctx, rdb) == nil && storeapi.StillHeld(cctx, rdb, l)
}

// until calls ok every 5ms until it is true (true), or StepWait passes or the run ends (false).
func (c *Chaos) until(ctx context.Context, stop <-chan struct{}, ok func() bool) bool {
	deadline := time.Now().Add(StepWait)
	for time.Now().Before(deadline) {
		if ok() {
			return true
		}
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return false
}

// holdsToken reports whether instance in still lists the lock of item itemID with token
// (answered is false when it did not answer: then it is taken as still holding).
func (c *Chaos) holdsToken(ctx context.Context, in *cluster.Instance, itemID, token int64) (answered, still bool) {
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	dl, err := storeapi.GetLocks(cctx, c.apis[0].HC, in.URL)
	if err != nil || dl.PID != in.PID() {
		return false, true
	}
	l, ok := dl.Item(itemID)
	return true, ok && l.Token == token
}

// unwritten reports whether no order of item itemID carries token yet (a purchase's, or a
// cart's line of the item: fencing tokens are per lock, so only that item's count), asking an
// instance other than the stopped one (they share the database). A hold's lines are not
// orders: a hold placed with the token is not seen. With one instance there is nobody else to
// ask (the stopped one would not answer): it reports true, as if unwritten.
func (c *Chaos) unwritten(ctx context.Context, stopped int, itemID, token int64) bool {
	if len(c.apis) < 2 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	orders, err := c.apis[(stopped+1)%len(c.apis)].ItemOrders(cctx, itemID)
	if err != nil {
		return false
	}
	for _, o := range orders {
		if o.ItemID == itemID && o.FenceToken == token {
			return false
		}
		for _, l := range o.Lines {
			if l.ItemID == itemID && l.FenceToken == token {
				return false
			}
		}
	}
	return true
}
