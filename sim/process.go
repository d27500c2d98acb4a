package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
	"github.com/stockguard/stockguard/models"
)

// Settings of every simulated process.
const (
	lockLease    = 6 * time.Second // short, so that a held write outlives it within a run
	poolSize     = 4
	clientWait   = 12 * time.Second // how long a buyer waits for an answer
	redisTimeout = 2 * time.Second
)

// process is one storefront process: its own database pool, go-redis client, lock Client and
// inventory.Service, as main wires them.
type process struct {
	id     int // unique in the run (a replacement gets a new one)
	slot   int // the place it serves (0..procs-1)
	ctx    context.Context
	cancel context.CancelFunc
	db     *gorm.DB
	rdb    *redis.Client
	lock   *locking.Client
	svc    *inventory.Service

	mu   sync.Mutex
	dead bool
}

// startProcess opens process id's connections and service.
func (w *world) startProcess(id, slot int) (*process, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{id: id, slot: slot, ctx: ctx, cancel: cancel}
	db, err := models.Open(ctx, w.db.dsn(w.dbPath, id), models.WithSQLiteDriver(driverName),
		models.WithMaxOpenConns(poolSize), models.WithLogger(w.log))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sim: process %d: %w", id, err)
	}
	p.db = db
	p.rdb = redis.NewClient(&redis.Options{
		Addr:                     "127.0.0.1:6379", // an address, not a name: nothing is looked up (the pipe is the Dialer's)
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer:                   w.redis.dialer(id),
		Protocol:                 2,
		ContextTimeoutEnabled:    true,
		DialTimeout:              time.Second,
		DialerRetries:            1,
		DialerRetryTimeout:       20 * time.Millisecond,
		ReadTimeout:              redisTimeout,
		WriteTimeout:             redisTimeout,
		PoolTimeout:              redisTimeout,
		MaxRetries:               -1,
		PoolSize:                 16,
	})
	p.lock = locking.New(p.rdb, &locking.Options{
		KeyPrefix: inventory.LockKeyPrefix,
		Lease:     lockLease,
		Logger:    w.log.With("proc", id),
	})
	cfg := inventory.Config{
		DB:          db,
		Locker:      inventory.NewLocker(p.lock),
		Logger:      w.log.With("proc", id),
		StreamAlone: w.plan.StreamAlone,
		HoldTTL:     time.Minute,
		Observer:    twinCounter{&w.twins},
	}
	w.mutate(&cfg)
	svc, err := inventory.NewService(cfg)
	if err != nil {
		p.close()
		return nil, err
	}
	p.svc = svc
	return p, nil
}

func (p *process) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// close lets go of everything the process opened (after a kill, nothing is released in
// Redis: its pipes are cut first).
func (p *process) close() {
	p.cancel()
	if p.svc != nil {
		_ = p.svc.Close()
	}
	if p.lock != nil {
		_ = p.lock.Close()
	}
	if p.rdb != nil {
		_ = p.rdb.Close()
	}
	if p.db != nil {
		_ = models.Close(p.db)
	}
}

// kill is the process dying: its requests' contexts end, its connections drop, and nothing
// it holds is released.
func (w *world) kill(p *process) {
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	dp := w.db.proc(p.id)
	dp.mu.Lock()
	dp.dead = true
	dp.mu.Unlock()
	w.redis.kill(p.id)
	p.cancel()
}

// discardLogger is the processes' logger unless -sim.v.
var discardLogger = slog.New(slog.DiscardHandler)

// twinCounter counts the purchase attempts the fence refused under the very token the
// database had already seen (Event.Seen == Event.Token): a twin token after Redis lost its
// counter, or a write again under a token whose transaction landed (the reuse-tried-token
// mutation). It shows a mutation run reached that write; no check reads it.
type twinCounter struct{ n *atomic.Int64 }

func (c twinCounter) Observe(ev inventory.Event) {
	if ev.Kind == inventory.EventFenceRefused && ev.Seen == ev.Token {
		c.n.Add(1)
	}
}
