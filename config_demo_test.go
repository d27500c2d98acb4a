//go:build !nodemo

package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A demo strategy is a valid default with --demo only.
func TestConfigDemoStrategyNeedsDemo(t *testing.T) {
	c, err := parseConfig([]string{"--demo", "--strategy", "setnx-expire"}, func(string) string { return "" }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "setnx-expire", c.strategy)
}

// A demo strategy needs --demo; the help lists the demo's strategies after the built-in ones.
func TestConfigDemoStrategyErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--strategy", "redis-stock"}, nil, `strategy "redis-stock" is demo-only`},
		{nil, map[string]string{"STRATEGY": "fixed-lease"}, `strategy "fixed-lease" is demo-only`},
	} {
		var stderr bytes.Buffer
		code := run(t.Context(), tt.args, func(k string) string { return tt.env[k] }, &stderr)
		assert.Equal(t, 2, code, "%v %v", tt.args, tt.env)
		assert.Contains(t, stderr.String(), tt.want)
	}
	var help bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"-h"}, func(string) string { return "" }, &help))
	assert.Contains(t, help.String(), "lock+guard, redlock+guard, setnx-expire (demo), ")
	assert.Contains(t, help.String(), "those marked (demo) are demo-only")
}

// --help tells what --demo serves and exposes.
func TestHelpDemo(t *testing.T) {
	var help bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"-h"}, func(string) string { return "" }, &help))
	for _, want := range []string{"lock lab", "X-Fault", "/debug/pprof/", "127.0.0.1:8080 unless --addr", "need the admin token",
		"a fresh SQLite file, deleted at exit"} {
		assert.Contains(t, help.String(), want)
	}
}

// Every flag of the supervisor reaches its lab instances, on their command line or (the URLs,
// which may carry passwords) in their environment, but for their own address and role and the
// admin token (notForwarded): a setting given to the lab as a flag acts on the instances as it
// would as an environment variable, which they inherit.
func TestInstanceArgsForwardEveryFlag(t *testing.T) {
	cfg, err := parseConfig([]string{"--demo", "--instances", "2", "--max-batch", "7", "--hold-ttl", "30s",
		"--max-purchases", "3", "--stream-alone=false", "--db", "postgres://shop:pw@db/shop"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	args, env, err := instanceArgs(cfg, "redis://:pw@redis:6379/0")
	require.NoError(t, err)
	joined := " " + strings.Join(args, " ") + " "
	for name, variable := range envOf {
		if notForwarded[name] {
			continue
		}
		onArgs := strings.Contains(joined, " --"+name+" ") || strings.Contains(joined, " --"+name+"=")
		inEnv := slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, variable+"=") })
		assert.True(t, onArgs || inEnv, "--%s reaches the instances", name)
	}
	assert.Contains(t, joined, " --max-batch 7 ")
	assert.Contains(t, joined, " --hold-ttl 30s ")
	assert.Contains(t, joined, " --max-purchases 3 ")
	assert.Contains(t, joined, " --stream-alone=false ")
	assert.NotContains(t, joined, "pw@", "no password on a command line")
	assert.Contains(t, env, "DATABASE_URL=postgres://shop:pw@db/shop")
	assert.Contains(t, env, "REDIS_URL=redis://:pw@redis:6379/0")
}
