// Package procutil holds what the helpers that start server processes for this process's own
// use (internal/redisproc, internal/pgproc, the lab's supervisor, the load test) share: a free
// loopback port, a bounded capture of a child's output, and stopping a child.
package procutil

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LimitedBuffer keeps the first Max bytes written to it; it is safe for concurrent writers.
type LimitedBuffer struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LimitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *LimitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Stop ends a child process and returns once it has been reaped (exited is closed by the
// goroutine that waits for it): SIGCONT first, in case it is paused, then SIGTERM, then SIGKILL
// if it has not exited within grace. grace 0 kills at once.
func Stop(p *os.Process, exited <-chan struct{}, grace time.Duration) {
	_ = p.Signal(syscall.SIGCONT)
	if grace > 0 {
		_ = p.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exited:
			return
		case <-t.C:
		}
	}
	_ = p.Kill()
	<-exited
}

// WaitStopped waits, up to within, until every thread of process pid is stopped (Stopped),
// and reports whether they were. A process that has exited (or is a zombie) never counts as
// stopped: it returns false at once.
func WaitStopped(pid int, within time.Duration) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(time.Millisecond) {
		if Stopped(pid) {
			return true
		}
		if gone(pid) || time.Now().After(deadline) {
			return false
		}
	}
}

// gone reports whether process pid has exited: no /proc entry, or a zombie.
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// Stopped reports whether every thread of process pid is stopped (Linux: /proc/pid/task/*/stat).
// SIGSTOP reaches the threads of a process one by one, and kill(2) returns before they stop: a
// thread still running may finish a write (a reply, a lock's release) after the signal was
// sent. A test that needs the process frozen waits until Stopped.
func Stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command's closing parenthesis: "pid (comm) S ...".
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}
