package lab

import (
	"context"
	"fmt"
	"net/http"
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
	// locks take the lease as their fixed lease).
	Lease, LockWait time.Duration
	// StallFor is how long the stall fault stops a purchase before its write: longer than
	// Lease, so that the stalled holder's lease runs out.
	StallFor time.Duration
}

// Storefront is the lab in one --demo storefront process: the event hub streamed on
// /api/events, the faults a lab run asks for with the X-Fault header, the demo strategies'
// locks, and the lab's page and API. Wire it in this order: LockHooks into every lock client,
// Inventory into the inventory configuration, Handlers into the handlers configuration; Close
// after the server has drained.
type Storefront struct {
	cfg    StorefrontConfig
	events *Events
	stall  *locking.Client // the stall fault's locks; nil until Inventory
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
// lock client of the item locks (locking.JoinHooks).
func (s *Storefront) LockHooks() locking.Hooks { return inventory.ObserverHooks(s.events) }

// Inventory adds the lab to the inventory service's configuration: the hub as its observer,
// the demo strategies' locks and stock mirror, and the stall fault, whose locks come from a
// second lock client with lockOpts (the storefront's item lock options) and the watchdog
// off, so that a stalled holder's lease runs out as it would if a stop-the-world pause had
// stopped its watchdog too.
func (s *Storefront) Inventory(icfg *inventory.Config, lockOpts *locking.Options) {
	icfg.Observer = s.events
	icfg.Pitfalls, icfg.Mirror = demoStrategies(s.cfg)
	opts := *lockOpts
	opts.DisableWatchdog = true
	s.stall = locking.New(s.cfg.Redis, &opts)
	icfg.StallFor = s.cfg.StallFor
	icfg.StallLocker = inventory.NewLocker(s.stall)
}

// Handlers adds the lab to the handlers' configuration: the faults of X-Fault, the lab page,
// /api/events and the lab's API (its reset loads the lab catalogue into cat).
func (s *Storefront) Handlers(hcfg *handlers.Config, cat Catalogue) {
	l := &api{lease: s.cfg.Lease, cat: cat, hc: newLabClient()}
	hcfg.Intercept = faults
	hcfg.Pages = pages()
	hcfg.Extend = func(r *gin.Engine) {
		r.GET("/api/events", handlers.LimitBody(handlers.MaxBodyBytes), s.events.Serve)
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

// HeaderFault is the purchase header of the lab's faults: "stall" stops the purchase before
// its write for longer than its lock's lease; "crash" (setnx-expire only) makes its lock's
// holder die between SETNX and EXPIRE.
const HeaderFault = "X-Fault"

// faults reads X-Fault into the purchase request.
func faults(r *http.Request, req *inventory.PurchaseRequest) error {
	values, ok := r.Header[http.CanonicalHeaderKey(HeaderFault)]
	switch {
	case !ok:
		return nil
	case len(values) == 1 && values[0] == faultStall:
		req.Stall = true
		return nil
	case len(values) == 1 && values[0] == faultCrash:
		req.Crash = true
		return nil
	}
	return fmt.Errorf("%w: %s must be %q or %q", inventory.ErrInvalid, HeaderFault, faultStall, faultCrash)
}
