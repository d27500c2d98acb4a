//go:build !nodemo

package main

import (
	"bytes"
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
