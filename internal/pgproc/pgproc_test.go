package pgproc_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/pgproc"
	"github.com/stockguard/stockguard/internal/testutil"
)

func TestStartCreateStopRestartClose(t *testing.T) {
	ctx := context.Background()
	s, err := pgproc.Start(pgproc.Options{})
	require.NoError(t, err)
	dir := s.Dir
	defer s.Close()
	require.DirExists(t, dir)
	assert.Positive(t, s.PID())

	url, err := s.CreateDatabase(ctx, "shop-1")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	require.NoError(t, err)
	var user string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_user").Scan(&user))
	assert.Equal(t, pgproc.Superuser, user)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
	assert.Equal(t, "off", fsync, "a test server does not fsync")
	require.NoError(t, conn.Close(ctx))

	// Killed (immediate shutdown, as a crash): connections are refused, then a restart on the
	// same port recovers the committed data.
	s.Kill()
	assert.Zero(t, s.PID())
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "refused while down")
	require.NoError(t, s.Restart())
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v))
	assert.Equal(t, 42, v)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, s.DropDatabase(ctx, "shop-1"))
	_, err = pgx.Connect(ctx, url)
	assert.Error(t, err, "dropped")

	s.Stop()
	require.NoError(t, s.Restart())
	s.Close()
	assert.NoDirExists(t, dir, "Close removes the cluster")
	assert.Error(t, s.Restart(), "a closed server does not start again")
}

func TestDurableKeepsFsync(t *testing.T) {
	testutil.SkipShort(t, testutil.Postgres)
	ctx := context.Background()
	s, err := pgproc.Start(pgproc.Options{Durable: true, Settings: map[string]string{"synchronous_commit": "off"}})
	require.NoError(t, err)
	defer s.Close()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	for name, want := range map[string]string{"fsync": "on", "synchronous_commit": "off", "listen_addresses": "127.0.0.1"} {
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SHOW "+name).Scan(&got))
		assert.Equal(t, want, got, name)
	}
}

func TestBinDir(t *testing.T) {
	dir, err := pgproc.BinDir()
	require.NoError(t, err)
	assert.FileExists(t, dir+"/initdb")
	assert.FileExists(t, dir+"/postgres")
}

func TestRootNeedsAnUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only meaningful as root: a non-root process runs the server as itself")
	}
	_, err := pgproc.Start(pgproc.Options{OSUser: "no-such-user-stockguard"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refuses to run as root")
}
