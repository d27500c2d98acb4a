package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/models"
)

// TestShutdownGraceOver: a purchase still working when the shutdown grace period ends is
// cancelled and waited for before the database and Redis are closed; it writes nothing, and
// run reports the unfinished shutdown with exit code 1.
func TestShutdownGraceOver(t *testing.T) {
	rs := redistest.Start(t)
	dbPath := filepath.Join(t.TempDir(), "grace.db")
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--db", dbPath, "--demo", "--admin-token", "t",
		"--redis", rs.URL(), "--shutdown-timeout", "200ms", "--log-level", "warn")

	answered := make(chan struct{})
	go func() {
		defer close(answered)
		req, err := http.NewRequest("POST", s.url+"/api/items/1/purchase", strings.NewReader(`{"quantity":1}`))
		if err != nil {
			return
		}
		req.Header.Set("X-Simulated-Work", "1s")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	lockKey := "stockguard:lock:{item:1}"
	require.Eventually(t, func() bool { return rs.Client(t).Exists(t.Context(), lockKey).Val() == 1 },
		5*time.Second, 5*time.Millisecond, "the purchase holds its lock")

	start := time.Now()
	assert.Equal(t, 1, s.shutdown(), "grace period over: exit 1")
	assert.Less(t, time.Since(start), 900*time.Millisecond, "the 1s of work was cancelled, not waited out")
	assert.Zero(t, rs.Client(t).Exists(t.Context(), lockKey).Val(),
		"the handler returned (and released its lock) before run closed Redis")
	<-answered

	db, err := models.Open(t.Context(), dbPath)
	require.NoError(t, err)
	defer models.Close(db)
	var orders int64
	require.NoError(t, db.Model(&models.Order{}).Count(&orders).Error)
	assert.Zero(t, orders, "the cancelled purchase wrote nothing")
}
