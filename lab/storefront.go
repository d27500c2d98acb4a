//go:build !nodemo

package lab

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// StorefrontConfig configures NewStorefront.
type StorefrontConfig struct {
	// Redis is the storefront's Redis: the demo strategies' locks and stock mirror, and the
	// stall fault's lock client, use it.
	Redis redis.UniversalClient
	// Lease and LockWait are the storefront's item lock lease and lock wait (the pitfall
	// locks take PitfallLease(Lease) as their fixed lease, and the lock wait).
	Lease, LockWait time.Duration
	// StallFor is how long the stall fault stops a purchase before its write: longer than
	// Lease, so that the stalled holder's lease runs out.
	StallFor time.Duration
	// Strategy is the storefront's default strategy (a purchase without X-Strategy).
	Strategy string
	// RequireToken makes the lab's routes that act (run, carts, pause, kill, lease, takeover,
	// reset) take the admin token (handlers.Config.AdminToken): set it when the storefront
	// listens beyond loopback.
	RequireToken bool
}

// Storefront is the lab in one --demo storefront process: the event hub streamed on
// /api/events, the faults a lab run asks for with the X-Fault header, the demo strategies'
// locks, and the lab's page and API. Wire it in this order: LockHooks into every lock client,
// Inventory into the inventory configuration, Handlers into the handlers configuration; Close
// after the server has drained.
type Storefront struct {
	cfg         StorefrontConfig
	events      *Events
	stall       *locking.Client  // the stall fault's lock client; nil until Inventory
	stallLocker inventory.Locker // its locks
}

// NewStorefront returns the lab of one storefront process. Its event streams end when ctx
// ends, as shutdown begins, so that they do not hold the shutdown up.
func NewStorefront(ctx context.Context, cfg StorefrontConfig) *Storefront {
	events := NewEvents(cfg.Lease)
	context.AfterFunc(ctx, events.Close)
	return &Storefront{cfg: cfg, events: events}
}

// Events returns the process's event hub.
func (s *Storefront) Events() *Events { return s.events }

// LockHooks returns the hooks that feed the item locks' events to the hub: add them to every
// lock client of the item locks (locking.JoinHooks), calling LockHooks once for each client
// (the Options given to Inventory included): each call's hooks keep their own client's tokens
// (Events.Scope), so that a release is told with its own token.
func (s *Storefront) LockHooks() locking.Hooks { return inventory.ObserverHooks(s.events.Scope()) }

// Inventory adds the lab to the inventory service's configuration: the hub as its observer
// and the demo strategies (their rows after the built-in ones). It also makes the stall
// fault's lock client, with lockOpts (the storefront's item lock options) and the watchdog
// off, so that a stalled holder's lease runs out as it would if a stop-the-world pause had
// stopped its watchdog too.
func (s *Storefront) Inventory(icfg *inventory.Config, lockOpts *locking.Options) {
	icfg.Observer = s.events
	icfg.Extra = append(icfg.Extra, demoStrategies(s.cfg, s.events)...)
	opts := *lockOpts
	opts.DisableWatchdog = true
	s.stall = locking.New(s.cfg.Redis, &opts)
	s.stallLocker = inventory.NewLocker(s.stall)
}

// Handlers adds the lab to the handlers' configuration: the faults of X-Fault, the lab page,
// /api/events, the demo carts' checkout (sold by cat) and the lab's API (its reset loads the
// lab catalogue into cat).
func (s *Storefront) Handlers(hcfg *handlers.Config, cat Catalogue) {
	l := &api{lease: s.cfg.Lease, cat: cat, hc: newLabClient(), guard: guardFor(s.cfg.RequireToken, hcfg.AdminToken), local: handlers.LocalOnly()}
	hcfg.Intercept = s.faults
	hcfg.Pages = pages()
	hcfg.Extend = func(r *gin.Engine) {
		r.GET("/api/events", handlers.LimitBody(handlers.MaxBodyBytes), s.events.Serve)
		r.POST("/api/lab/checkout", handlers.LimitBody(handlers.MaxBodyBytes), s.checkout(cat))
		l.routes(r)
	}
}

// Close ends the event streams and closes the stall fault's lock client.
func (s *Storefront) Close() error {
	s.events.Close()
	if s.stall == nil {
		return nil
	}
	return s.stall.Close()
}
