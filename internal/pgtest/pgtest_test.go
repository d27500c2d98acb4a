package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/pgtest"
)

var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

func TestDatabasesArePrivateAndDropped(t *testing.T) {
	ctx := context.Background()
	var first string
	t.Run("a", func(t *testing.T) {
		first = pg.Database(t)
		conn, err := pgx.Connect(ctx, first)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE only_here (v int)")
		require.NoError(t, err)
	})
	_, err := pgx.Connect(ctx, first)
	assert.Error(t, err, "dropped when its test ended")

	second := pg.Database(t)
	assert.NotEqual(t, first, second)
	conn, err := pgx.Connect(ctx, second)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'").Scan(&n))
	assert.Zero(t, n)
	assert.Same(t, pg.Server(t), pg.Server(t), "one server per package")
}
