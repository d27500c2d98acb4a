package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// DefaultRedisCallTimeout is the default of --redis-call-timeout: the longest one lock call
// (acquire, renewal, release) may wait for Redis. A healthy Redis answers in well under a
// millisecond; a hung one is found out in three of these (the breaker's failure count), well
// inside the purchase's budget.
const DefaultRedisCallTimeout = 250 * time.Millisecond

// newBreakers returns the process's Redis circuit breakers (one per node, locking.Breakers),
// their state exported on reg as the gauge stockguard_redis_breaker_state{node} (0 closed,
// 1 half-open, 2 open). Transitions are logged by the breakers, one line each, and given to
// onState (nil: none; the breaker.open spans of inventory.BreakerSpans when tracing is on).
func newBreakers(reg prometheus.Registerer, logger *slog.Logger, onState func(string, locking.BreakerState)) *locking.Breakers {
	b := locking.NewBreakers(&locking.BreakerOptions{Logger: logger.With("component", "redis-breaker"), OnState: onState})
	reg.MustRegister(breakerCollector{b})
	return b
}

// breakerCollector reads every breaker's state at scrape time, so that each node has its
// gauge from the start, closed.
type breakerCollector struct{ b *locking.Breakers }

var breakerStateDesc = prometheus.NewDesc("stockguard_redis_breaker_state",
	"State of the circuit breaker of each Redis node: 0 closed, 1 half-open (a probe in flight), 2 open (lock calls fail at once).",
	[]string{"node"}, nil)

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- breakerStateDesc }

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for node, st := range c.b.States() {
		ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, float64(st), node)
	}
}

// breakerChecks makes the readiness checks of the Redis nodes tell an open breaker: their
// state is "open", and under --on-redis-down=guard (the storefront sells without Redis)
// such a check does not fail readiness.
func breakerChecks(checks []inventory.Check, onRedisDown string) []inventory.Check {
	out := make([]inventory.Check, len(checks))
	for i, c := range checks {
		ping := c.Ping
		c.Ping = func(ctx context.Context) error {
			err := ping(ctx)
			if errors.Is(err, locking.ErrBreakerOpen) {
				return &inventory.CheckError{State: "open", Optional: onRedisDown == inventory.OnRedisDownGuard, Err: err}
			}
			return err
		}
		out[i] = c
	}
	return out
}

// DefaultMaxPurchases is the default of --max-purchases: purchases in flight per process.
// A healthy storefront has a few dozen (1,000 req/s at 25ms); the bound is for a database or
// Redis that hangs, when every purchase would wait up to its deadline and pile up.
const DefaultMaxPurchases = 1024
