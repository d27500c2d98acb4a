package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/inventory"
)

// overdueHoldsDesc is the gauge of the active holds past their expiry (inventory.OverdueHolds),
// read at scrape time: the soak (loadtest -soak) fits it over an hour of faults.
var overdueHoldsDesc = prometheus.NewDesc("stockguard_holds_overdue",
	"Active stock holds past their expiry by the database's clock, not yet ended by a write of one of their items.",
	nil, nil)

// overdueHolds counts the overdue holds at each scrape, bounded by a second: a scrape while the
// database hangs leaves the gauge out (logged at debug) rather than holding /metrics.
type overdueHolds struct {
	svc *inventory.Service
	log *slog.Logger
}

func (c overdueHolds) Describe(ch chan<- *prometheus.Desc) { ch <- overdueHoldsDesc }

func (c overdueHolds) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := c.svc.OverdueHolds(ctx)
	if err != nil {
		c.log.Debug("metrics: overdue holds not counted", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(overdueHoldsDesc, prometheus.GaugeValue, float64(n))
}
