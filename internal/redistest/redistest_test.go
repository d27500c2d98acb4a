package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

func TestStartStopRestartPause(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	srv.Restart(t)
	assert.ErrorContains(t, rdb.Get(ctx, "k").Err(), "nil", "a restarted server keeps no data")

	srv.Pause()
	pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := rdb.Ping(pctx).Err()
	cancel()
	assert.Error(t, err, "a paused server answers nothing")
	srv.Resume()
	require.NoError(t, rdb.Ping(ctx).Err())

	srv.Stop()
	assert.Error(t, rdb.Ping(ctx).Err())
}
