package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/loadtest/client"
)

// Instance is one storefront child process.
type Instance struct {
	Index int
	URL   string
	args  []string // its command line (RestartInstance starts it again with the same one)
	cmd   *exec.Cmd
	out   *logSink
	done  chan struct{} // closed when the process has exited and been reaped
	mu    sync.Mutex
	state string // "running", "stopped" (SIGSTOP), "exited"
}

// PID returns the process id of the instance.
func (in *Instance) PID() int { return in.cmd.Process.Pid }

// LockProcess returns the process id of the instance's lock Client, as its start-up log line
// "lock process" named it (locks taken for lock+guard name it: locking.HolderProcess); ""
// when the storefront logged none (yet).
func (in *Instance) LockProcess() string { return in.out.lockProcess() }

// Kill ends the process at once with SIGKILL, as a crash would: it releases nothing.
func (in *Instance) Kill() {
	_ = in.cmd.Process.Kill()
	<-in.done
}

// Pause stops the process with SIGSTOP.
func (in *Instance) Pause() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.state != "running" {
		return fmt.Errorf("instance %d is %s", in.Index, in.state)
	}
	if err := in.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// kill(2) returns before every thread has stopped, and a thread still running may finish
	// a write (a lock's release, a COMMIT): Pause returns once the process is frozen, so that
	// what its caller reads next cannot be overtaken by the process's own last writes.
	if !procutil.WaitStopped(in.cmd.Process.Pid, 5*time.Second) {
		_ = in.cmd.Process.Signal(syscall.SIGCONT)
		return fmt.Errorf("instance %d (pid %d) not stopped 5s after SIGSTOP (or it exited)", in.Index, in.cmd.Process.Pid)
	}
	in.state = "stopped"
	return nil
}

// Resume continues a process stopped by Pause.
func (in *Instance) Resume() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.state != "stopped" {
		return nil
	}
	in.state = "running"
	return in.cmd.Process.Signal(syscall.SIGCONT)
}

// stop ends the process: SIGTERM, then SIGKILL after grace. It returns once the process is reaped.
func (in *Instance) stop(grace time.Duration) {
	_ = in.Resume()
	select {
	case <-in.done:
		return
	default:
	}
	procutil.Stop(in.cmd.Process, in.done, grace)
}

func startInstance(bin string, args []string, idx int, dir string) (*Instance, error) {
	// Appended to: an instance started again (RestartInstance) goes on in the same log.
	logFile, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("instance-%d.log", idx)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	sink := &logSink{file: logFile, addr: make(chan string, 1)}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = sink, sink
	cmd.Dir = dir
	// Own process group: a terminal's Ctrl-C reaches only us, and we stop the children in order.
	// Pdeathsig: if the load test dies abruptly, the kernel kills the children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start storefront: %w", err)
	}
	in := &Instance{Index: idx, args: args, cmd: cmd, out: sink, done: make(chan struct{}), state: "running"}
	go func() { // owner: the Instance; ends when the process exits (stop() guarantees that)
		_ = cmd.Wait()
		logFile.Close()
		in.mu.Lock()
		in.state = "exited"
		in.mu.Unlock()
		close(in.done)
	}()
	return in, nil
}

func (in *Instance) waitListening(ctx context.Context, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case addr := <-in.out.addr:
		in.URL = "http://" + addr
		return nil
	case <-in.done:
		return fmt.Errorf("storefront instance %d exited during start-up: %s", in.Index, in.out.tail())
	case <-t.C:
		return fmt.Errorf("storefront instance %d: no %q log line after %s", in.Index, "listening addr=", limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (in *Instance) waitReady(ctx context.Context, limit time.Duration) error {
	a := &client.API{Base: in.URL, HC: client.NewHTTPClient(1, time.Second)}
	defer a.HC.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	for {
		err := a.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-in.done:
			return fmt.Errorf("storefront instance %d exited: %s", in.Index, in.out.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("storefront instance %d at %s not ready after %s: %v", in.Index, in.URL, limit, err)
		}
	}
}
