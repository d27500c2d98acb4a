package cluster

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"sync"
)

// listeningRE matches the storefront's start-up log line, e.g. msg=listening addr=127.0.0.1:43121.
var listeningRE = regexp.MustCompile(`msg="?listening"?(?:\s|$).*?\baddr="?([^\s"]+)`)

// lockProcessRE matches the storefront's start-up log line that names its lock Client's
// process, e.g. msg="lock process" process=3f9c2a...: lock+guard's locks name that process.
var lockProcessRE = regexp.MustCompile(`msg="lock process".*?\bprocess="?([^\s"]+)`)

// logSink receives a child's output: it copies it to a file, keeps the last lines for error
// messages, and reports the first "listening" address.
type logSink struct {
	mu      sync.Mutex
	file    *os.File
	partial []byte
	last    []string
	addr    chan string
	found   bool
	process string // the lock Client's process id, from the "lock process" line
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.file.Write(p)
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := string(s.partial[:i])
		s.partial = s.partial[i+1:]
		if !s.found {
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				s.found = true
				s.addr <- m[1]
			}
		}
		if s.process == "" {
			if m := lockProcessRE.FindStringSubmatch(line); m != nil {
				s.process = m[1]
			}
		}
		s.last = append(s.last, line)
		if len(s.last) > 5 {
			s.last = s.last[1:]
		}
	}
	if len(s.partial) > 64<<10 {
		s.partial = s.partial[:0]
	}
	return len(p), nil
}

// lockProcess returns the process id the child's "lock process" line named ("" before it).
func (s *logSink) lockProcess() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.process
}

func (s *logSink) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.last) == 0 {
		return "(no output)"
	}
	return strings.Join(s.last, " | ")
}
