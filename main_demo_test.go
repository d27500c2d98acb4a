//go:build !nodemo

package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
)

// childEnv makes the test binary run as the storefront: the lab supervisor starts its own
// executable as its instances, and in tests that is this binary.
const childEnv = "STOCKGUARD_TEST_AS_STOREFRONT"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// `--demo --instances 1` serves the lab over one storefront child that shares the
// supervisor's Redis and admin token, and stops the child with itself. (Package lab tests the
// lab; this is the command's wiring of it.)
func TestDemoInstances(t *testing.T) {
	t.Setenv(childEnv, "1")
	rs := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--instances", "1", "--redis", rs.URL(), "--lock-lease", "2s")...)
	var info struct {
		Instances []struct {
			PID  int    `json:"pid"`
			Base string `json:"base"`
		} `json:"instances"`
		LeaseMS float64 `json:"lease_ms"`
		Pause   bool    `json:"pause"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	require.Len(t, info.Instances, 1)
	assert.True(t, info.Pause)
	assert.EqualValues(t, 2000, info.LeaseMS)
	assert.NotEqual(t, os.Getpid(), info.Instances[0].PID)
	var items []item
	require.Equal(t, 200, s.call("POST", "/i/0/api/lab/reset", "{}", &items))
	require.Len(t, items, 3)
	require.Equal(t, 0, s.shutdown())
	assert.True(t, errors.Is(syscall.Kill(info.Instances[0].PID, 0), syscall.ESRCH), "the instance stopped with the supervisor")
}

// A --demo storefront serves the lab page, its event stream and the demo strategies.
func TestDemoStorefrontServesTheLab(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, nil, append(baseArgs(t), "--redis", rs.URL())...)
	var info struct {
		Instances []struct {
			PID int `json:"pid"`
		} `json:"instances"`
	}
	require.Equal(t, 200, s.call("GET", "/api/lab", "", &info))
	require.Len(t, info.Instances, 1)
	assert.Equal(t, os.Getpid(), info.Instances[0].PID, "the lab of this one process")
	var r struct {
		Strategy string `json:"strategy"`
	}
	require.Equal(t, 201, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, &r, "X-Strategy: setnx-expire"))
	assert.Equal(t, "setnx-expire", r.Strategy)
	assert.Equal(t, 0, s.shutdown())
}
