package procutil_test

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/procutil"
)

func TestFreePortCanBeBound(t *testing.T) {
	port, err := procutil.FreePort()
	require.NoError(t, err)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestLimitedBufferKeepsTheFirstBytes(t *testing.T) {
	b := &procutil.LimitedBuffer{Max: 10}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := b.Write([]byte("abcd"))
			assert.NoError(t, err)
			assert.Equal(t, 4, n, "a write always reports the whole slice taken")
		}()
	}
	wg.Wait()
	assert.Len(t, b.String(), 10)
}

// startChild starts sh -c script, waits for its first line of output (the script says it is
// ready), and returns it with a channel closed once it is reaped.
func startChild(t *testing.T, script string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd, exited
}

func signalOf(t *testing.T, cmd *exec.Cmd) syscall.Signal {
	t.Helper()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled(), "the child ended by a signal, not with status %d", ws.ExitStatus())
	return ws.Signal()
}

func TestStopContinuesAPausedChildAndEndsItWithSIGTERM(t *testing.T) {
	cmd, exited := startChild(t, "echo ready; exec sleep 60")
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	procutil.Stop(cmd.Process, exited, time.Minute)
	assert.Equal(t, syscall.SIGTERM, signalOf(t, cmd))
}

func TestStopKillsAChildThatIgnoresSIGTERMAfterGrace(t *testing.T) {
	// An ignored signal stays ignored across exec: sleep ignores SIGTERM too.
	cmd, exited := startChild(t, `trap "" TERM; echo ready; exec sleep 60`)
	procutil.Stop(cmd.Process, exited, 100*time.Millisecond)
	assert.Equal(t, syscall.SIGKILL, signalOf(t, cmd))
}

func TestStopWithoutGraceKills(t *testing.T) {
	cmd, exited := startChild(t, "echo ready; exec sleep 60")
	procutil.Stop(cmd.Process, exited, 0)
	assert.Equal(t, syscall.SIGKILL, signalOf(t, cmd))
}

func TestStoppedFollowsSIGSTOPAndSIGCONT(t *testing.T) {
	cmd, _ := startChild(t, "echo ready; exec sleep 60")
	pid := cmd.Process.Pid
	assert.False(t, procutil.Stopped(pid), "a running child")
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	require.Eventually(t, func() bool { return procutil.Stopped(pid) }, 5*time.Second, time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	require.Eventually(t, func() bool { return !procutil.Stopped(pid) }, 5*time.Second, time.Millisecond)
	assert.False(t, procutil.Stopped(1<<30), "no such process")
}
