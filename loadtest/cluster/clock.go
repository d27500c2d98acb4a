package cluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// clockShimC is the source of the wall-clock shim preloaded into redis-server for -chaos clock.
//
//go:embed clockshim.c.src
var clockShimC string

// TopologyClock is one redis-server whose wall clock the load test can step forward
// (-chaos clock): it runs with clockshim.c preloaded, reading its offset from a file.
//
// libfaketime would be the usual tool, but it cannot run a redis-server linked with jemalloc
// (Debian's): jemalloc's initialisation calls clock_gettime before libfaketime is ready, which
// libfaketime reports as a recursion and aborts. The shim replaces gettimeofday only, the clock
// of Redis's key expiries.
const TopologyClock = "clock"

// RedisClock steps the wall clock of a redis-server started with the clock shim.
type RedisClock struct {
	file string

	mu     sync.Mutex
	offset time.Duration
}

// prepareClock compiles the clock shim into dir and writes a zero offset: it returns the clock
// and the environment of the redis-server that uses it. It needs a C compiler (cc).
func prepareClock(ctx context.Context, dir string) (*RedisClock, []string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return nil, nil, errors.New("-chaos clock compiles a small clock shim for redis-server: it needs a C compiler (apt-get install gcc)")
	}
	src, so := filepath.Join(dir, "clockshim.c"), filepath.Join(dir, "clockshim.so")
	if err := os.WriteFile(src, []byte(clockShimC), 0o600); err != nil {
		return nil, nil, err
	}
	if out, err := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-o", so, src).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("compile the clock shim: %w: %s", err, out)
	}
	c := &RedisClock{file: filepath.Join(dir, "clock-offset")}
	if err := c.set(0); err != nil {
		return nil, nil, err
	}
	return c, []string{"LD_PRELOAD=" + so, "CLOCKSHIM_OFFSET_FILE=" + c.file}, nil
}

// set makes the server's clock run offset ahead of the real one (the file is replaced
// atomically: the server reads it at every call).
func (c *RedisClock) set(offset time.Duration) error {
	tmp := c.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(offset.Microseconds(), 10)), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.file); err != nil {
		return err
	}
	c.offset = offset
	return nil
}

// Jump steps the server's clock forward by d and returns the new offset.
func (c *RedisClock) Jump(d time.Duration) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.offset + d
	if err := c.set(next); err != nil {
		return c.offset, err
	}
	return next, nil
}
