package main

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, config{
		addr: ":8080", db: "stockguard.db", strategy: "lock+guard", onRedisDown: "fail", lockLease: 30 * time.Second,
		lockWait: 5 * time.Second, logLevel: slog.LevelInfo, shutdownTimeout: 15 * time.Second,
		dbStmtTimeout: 5 * time.Second, maxBatch: 64, streamAlone: true, redisCall: 250 * time.Millisecond, maxPurchases: 1024,
		holdTTL: 10 * time.Minute,
	}, c)
	assert.Equal(t, 10*time.Second, c.writeTimeout())
}

func TestConfigEnvFallbackAndFlagPrecedence(t *testing.T) {
	env := map[string]string{
		"ADDR": ":9000", "DATABASE_URL": "/data/x.db", "REDIS_URL": "redis://a:6379/0, redis://b:6379/0",
		"STRATEGY": "guard", "LOCK_LEASE": "10s", "LOCK_WAIT": "1s", "ADMIN_TOKEN": "t0k",
		"DEMO": "true", "MAX_INFLIGHT_PER_ITEM": "8", "LOG_LEVEL": "debug", "SHUTDOWN_TIMEOUT": "3s",
		"DB_POOL": "12", "DB_STATEMENT_TIMEOUT": "750ms",
		"REDIS_CLUSTER": "true", "ON_REDIS_DOWN": "guard",
		"MAX_BATCH": "1", "REDIS_CALL_TIMEOUT": "100ms", "MAX_PURCHASES": "32", "HOLD_TTL": "90s",
	}
	c, err := parseConfig([]string{"--addr", "127.0.0.1:0", "--demo=false"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", c.addr, "a flag wins over its variable")
	assert.False(t, c.demo, "a flag wins over its variable")
	assert.Equal(t, "/data/x.db", c.db)
	assert.Equal(t, []string{"redis://a:6379/0", "redis://b:6379/0"}, c.redisURLList())
	assert.Equal(t, "guard", c.strategy)
	assert.Equal(t, 10*time.Second, c.lockLease)
	assert.Equal(t, time.Second, c.lockWait)
	assert.Equal(t, "t0k", c.adminToken)
	assert.Equal(t, 8, c.maxInflight)
	assert.Equal(t, 100*time.Millisecond, c.redisCall)
	assert.Equal(t, 32, c.maxPurchases)
	assert.Equal(t, 1, c.maxBatch)
	assert.Equal(t, 90*time.Second, c.holdTTL)
	assert.Equal(t, slog.LevelDebug, c.logLevel)
	assert.Equal(t, 3*time.Second, c.shutdownTimeout)
	assert.Equal(t, 12, c.dbPool)
	assert.Equal(t, 750*time.Millisecond, c.dbStmtTimeout)
	assert.Equal(t, 1500*time.Millisecond, c.writeTimeout())
	assert.True(t, c.redisCluster)
	assert.Equal(t, "guard", c.onRedisDown)
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--strategy", "yolo"}, nil, `unknown strategy "yolo"`},
		{nil, map[string]string{"LOCK_LEASE": "soon"}, `invalid value "soon" for LOCK_LEASE`},
		{nil, map[string]string{"DEMO": "maybe"}, `for DEMO`},
		{[]string{"--lock-lease", "1ms"}, nil, "too short"},
		{[]string{"--log-level", "loud"}, nil, "loud"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"--db-pool", "-1"}, nil, "--db-pool -1"},
		{nil, map[string]string{"DB_STATEMENT_TIMEOUT": "1ms"}, "--db-statement-timeout 1ms"},
		{nil, map[string]string{"ON_REDIS_DOWN": "hope"}, `--on-redis-down "hope"`},
		{[]string{"--redis", "redis://h:1?master_name=m", "--redis-cluster"}, nil, "choose one"},
		{[]string{"--max-batch", "0"}, nil, "--max-batch 0 must be 1..10000"},
		{[]string{"--hold-ttl", "2h"}, nil, "--hold-ttl 2h0m0s must be 1s..1h0m0s"},
		{[]string{"--lock-replicas", "-1", "--redis", "redis://h:1"}, nil, "--lock-replicas -1 must be 0..16"},
		{[]string{"--lock-replicas", "1"}, nil, "--lock-replicas needs --redis"},
		{[]string{"--lock-replicas", "1", "--redis", "redis://a:1,redis://b:1"}, nil, "does not apply to Redlock"},
	} {
		var stderr bytes.Buffer
		code := run(t.Context(), tt.args, func(k string) string { return tt.env[k] }, &stderr)
		assert.Equal(t, 2, code, "%v %v", tt.args, tt.env)
		assert.Contains(t, stderr.String(), tt.want)
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"-h"}, func(string) string { return "" }, &stderr))
	for name, env := range envOf {
		assert.Contains(t, stderr.String(), "-"+name)
		assert.Contains(t, stderr.String(), "[$"+env+"]")
	}
	_, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &bytes.Buffer{})
	assert.ErrorIs(t, err, flag.ErrHelp)
	assert.False(t, strings.Contains(stderr.String(), "%!"))
}

func TestInstancesNeedsDemo(t *testing.T) {
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"--instances", "2"}, func(string) string { return "" }, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "--instances needs --demo")
}

// --demo listens on loopback unless an address is given; beyond loopback it is exposed (its
// lab's mutating routes and profiles then take the admin token). Its database is its own
// unless --db names one.
func TestConfigDemoAddress(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		env     map[string]string
		addr    string
		exposed bool
	}{
		{[]string{"--demo"}, nil, "127.0.0.1:8080", false},
		{[]string{"--demo", "--addr", ":8080"}, nil, ":8080", true},
		{[]string{"--demo"}, map[string]string{"ADDR": "0.0.0.0:9000"}, "0.0.0.0:9000", true},
		{[]string{"--demo", "--addr", "[::]:1"}, nil, "[::]:1", true},
		{[]string{"--demo", "--addr", "192.168.1.4:1"}, nil, "192.168.1.4:1", true},
		{[]string{"--demo", "--addr", "localhost:1"}, nil, "localhost:1", false},
		{[]string{"--demo", "--addr", "[::1]:1"}, nil, "[::1]:1", false},
		{nil, nil, ":8080", false}, // not a demo: the storefront's own address, nothing of the lab
	} {
		c, err := parseConfig(tt.args, func(k string) string { return tt.env[k] }, &bytes.Buffer{})
		require.NoError(t, err)
		assert.Equal(t, tt.addr, c.addr, "%v %v", tt.args, tt.env)
		assert.Equal(t, tt.exposed, c.exposed(), "%v %v", tt.args, tt.env)
	}
	c, err := parseConfig([]string{"--demo"}, func(string) string { return "" }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.False(t, c.dbGiven)
	assert.Equal(t, demoLease, c.lockLease)
	c, err = parseConfig([]string{"--demo"}, func(k string) string { return map[string]string{"DATABASE_URL": "x.db"}[k] }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.True(t, c.dbGiven)
}

// A duration without its unit is refused with what is wanted, from a flag or a variable.
func TestConfigDurationNeedsUnit(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 2, run(t.Context(), []string{"--lock-lease", "3"}, func(string) string { return "" }, &stderr))
	assert.Contains(t, stderr.String(), `invalid value "3" for flag -lock-lease: want a Go duration with its unit, such as 3s`)
	stderr.Reset()
	assert.Equal(t, 2, run(t.Context(), nil, func(k string) string { return map[string]string{"LOCK_WAIT": "5"}[k] }, &stderr))
	assert.Contains(t, stderr.String(), `invalid value "5" for LOCK_WAIT: want a Go duration with its unit`)
}

// Every log record is one line: a driver's multi-line error is folded, not escaped.
func TestLogRecordsAreOneLine(t *testing.T) {
	var out bytes.Buffer
	logger := newLogger(&out, slog.LevelInfo)
	logger.Error("stockguard failed", "err", errors.New("failed to connect:\n\t127.0.0.1:1: refused\n\t[::1]:1: refused"))
	assert.Equal(t, 1, strings.Count(out.String(), "\n"), out.String())
	assert.NotContains(t, out.String(), `\n`)
	assert.Contains(t, out.String(), "failed to connect:; 127.0.0.1:1: refused; [::1]:1: refused")
}

// go-redis's own lines (a refused dial while a Redis boots) are debug lines of the logger.
func TestRedisLoggerIsDebug(t *testing.T) {
	var out bytes.Buffer
	redisLogger{newLogger(&out, slog.LevelInfo)}.Printf(t.Context(), "redis: connection pool: failed to dial: %s", "refused")
	assert.Empty(t, out.String())
	redisLogger{newLogger(&out, slog.LevelDebug)}.Printf(t.Context(), "redis: connection pool: failed to dial: %s", "refused")
	assert.Contains(t, out.String(), "level=DEBUG")
}

// --lock-replicas (LOCK_REPLICAS) is read with one deployment's URL, a Sentinel's here.
func TestConfigLockReplicas(t *testing.T) {
	env := map[string]string{"LOCK_REPLICAS": "1", "REDIS_URL": "redis://s1:26379?master_name=m&addr=s2:26379"}
	c, err := parseConfig(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 1, c.lockReplicas)
}
