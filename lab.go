package main

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// labEvents returns the event hub of the lab's GET /api/events in demo mode (nil otherwise).
// Its streams end when ctx ends, as shutdown begins, so that they do not hold it up.
func labEvents(ctx context.Context, cfg config) *handlers.Events {
	if !cfg.demo {
		return nil
	}
	events := handlers.NewEvents(cfg.lockLease)
	context.AfterFunc(ctx, events.Close)
	return events
}

// labHooks are the lock hooks that feed the lab's events (none without a hub).
func labHooks(events *handlers.Events) locking.Hooks {
	if events == nil {
		return locking.Hooks{}
	}
	return inventory.ObserverHooks(events)
}

// labStall sets up what demo mode adds: the events as the inventory service's observer, and
// the stall fault of the handlers, whose locks come from a second lock client on the same
// Redis and key prefix with the watchdog off, so that a stalled holder's lease runs out as it
// would if a stop-the-world pause had stopped its watchdog too. The caller closes the
// returned client.
func labStall(icfg *inventory.Config, hcfg *handlers.Config, cfg config, events *handlers.Events, rdb redis.UniversalClient, opts *locking.Options) *locking.Client {
	opts.DisableWatchdog = true
	stall := locking.New(rdb, opts)
	icfg.Observer = events
	hcfg.StallFor = cfg.stallFor()
	hcfg.StallLocker = inventory.NewLocker(stall)
	return stall
}
