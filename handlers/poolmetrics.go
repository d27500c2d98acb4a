package handlers

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// DBStatsName is the db_name label of the database pool's metrics.
const DBStatsName = "stockguard"

// RegisterDBStats exports the database pool's statistics on reg (Prometheus's DBStats
// collector: go_sql_open_connections, go_sql_in_use_connections, go_sql_idle_connections,
// go_sql_max_open_connections, go_sql_wait_count_total, go_sql_wait_duration_seconds_total
// and the closed-connection counters, each labelled db_name="stockguard"): a connection held
// by a cancelled transaction shows as one in use that never comes back. It returns reg's
// error when a collector of the same metrics is already registered.
func RegisterDBStats(reg prometheus.Registerer, db *sql.DB) error {
	return reg.Register(collectors.NewDBStatsCollector(db, DBStatsName))
}

// overdueHoldsDesc is the gauge of the active holds past their expiry (inventory.OverdueHolds),
// read at scrape time: the soak (loadtest -soak) fits it over an hour of faults.
var overdueHoldsDesc = prometheus.NewDesc("stockguard_holds_overdue",
	"Active stock holds past their expiry by the database's clock, not yet ended by a write of one of their items.",
	nil, nil)

// overdueHoldsTimeout bounds one scrape's count of the overdue holds.
const overdueHoldsTimeout = time.Second

// NewOverdueHolds returns the collector of stockguard_holds_overdue: count (for example
// inventory.Service.OverdueHolds) is called at each scrape, bounded by a second; a scrape while
// the database hangs or fails leaves the gauge out (logged at debug on log) rather than holding
// /metrics.
func NewOverdueHolds(count func(context.Context) (int64, error), log *slog.Logger) prometheus.Collector {
	return overdueHolds{count: count, log: log}
}

// overdueHolds is the collector NewOverdueHolds returns.
type overdueHolds struct {
	count func(context.Context) (int64, error)
	log   *slog.Logger
}

func (c overdueHolds) Describe(ch chan<- *prometheus.Desc) { ch <- overdueHoldsDesc }

func (c overdueHolds) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), overdueHoldsTimeout)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		c.log.Debug("metrics: overdue holds not counted", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(overdueHoldsDesc, prometheus.GaugeValue, float64(n))
}
