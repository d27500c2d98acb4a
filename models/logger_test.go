package models_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/models"
)

// closedPort returns a loopback address where nothing listens (a connection is refused).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// A database that cannot be opened is one error, returned: GORM's own "failed to initialize
// database" line is not logged at Error beside it (Open's caller logs the error it returns).
// Once the database is open, GORM's Error lines are errors again.
func TestOpenFailureLogsNoErrorOfGORM(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))

	for _, dsn := range []string{
		"postgres://bad:bad@" + closedPort(t) + "/x?connect_timeout=5",
		filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"),
	} {
		_, err := models.Open(context.Background(), dsn, models.WithLogger(log))
		require.Error(t, err, dsn)
	}
	assert.NotContains(t, buf.String(), "level=ERROR", "Open logs no error of its own")
	assert.Contains(t, buf.String(), "level=DEBUG msg=\"failed to initialize database",
		"GORM's line is kept at debug")

	buf = syncBuffer{}
	db, err := models.Open(context.Background(), filepath.Join(t.TempDir(), "ok.db"), models.WithLogger(log))
	require.NoError(t, err)
	defer models.Close(db)
	db.Logger.Error(context.Background(), "gorm says %s", "this")
	assert.Regexp(t, `(?m)^time=\S+ level=ERROR msg="gorm says this"$`, buf.String(), "after Open, GORM's errors are errors")
}
