package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"gorm.io/gorm"
)

// dbStatsName is the db_name label of the database pool's metrics.
const dbStatsName = "stockguard"

// registerDBStats exports the database pool's statistics on reg (Prometheus's DBStats
// collector: go_sql_open_connections, go_sql_in_use_connections, go_sql_idle_connections,
// go_sql_max_open_connections, go_sql_wait_count_total, go_sql_wait_duration_seconds_total
// and the closed-connection counters, each labelled db_name="stockguard"): a connection held
// by a cancelled transaction shows as one in use that never comes back.
func registerDBStats(reg prometheus.Registerer, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("database pool metrics: %w", err)
	}
	return reg.Register(collectors.NewDBStatsCollector(sqlDB, dbStatsName))
}
