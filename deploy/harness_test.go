package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/internal/storefrontbin"
	"github.com/stockguard/stockguard/internal/testutil"
)

// The harness of the nginx tests: the storefront, nginx and their processes, and requests
// through nginx with the replica that answered each (its access log).

type item struct {
	ID  int64  `json:"id"`
	SKU string `json:"sku"`
}

// answer is one response through nginx.
type answer struct {
	status    int
	body      []byte
	requestID string
	upstreams []string // $upstream_addr: every replica tried, the answering one last
}

func (a answer) last() string { return a.upstreams[len(a.upstreams)-1] }

// nginxPath returns Debian's nginx binary; a machine without it fails the test with the
// package to install (make test installs it).
func nginxPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Fatal("nginx not found: install the Debian package nginx-light (make system-packages does)")
	return ""
}

// buildStorefront builds the storefront (the module's root package) into dir, or returns the
// one make test built for the run (STOCKGUARD_BIN, internal/storefrontbin).
func buildStorefront(t *testing.T, dir string) string {
	t.Helper()
	testutil.SkipShort(t, testutil.MultiProcess)
	bin, err := storefrontbin.Shared(context.Background(), "..", dir)
	require.NoError(t, err)
	return bin
}

// process is a child process of the test, stopped when the test ends.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *procutil.LimitedBuffer
}

// startProcess starts name in dir; its standard output goes to stdout, its standard error
// is kept for the test's log.
func startProcess(t *testing.T, dir string, stdout io.Writer, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), done: make(chan struct{})}
	p.out = &procutil.LimitedBuffer{Max: 64 << 10}
	p.cmd.Dir = dir
	p.cmd.Stdout = stdout
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd.WaitDelay = 2 * time.Second
	require.NoError(t, p.cmd.Start(), "start %s", name)
	go func() { // owner: the process; ends when it exits (the cleanup makes sure it does)
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		procutil.Stop(p.cmd.Process, p.done, 5*time.Second)
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), p.out)
		}
	})
	return p
}

// storefront is one storefront process, as a compose replica runs it (no demo).
type storefront struct {
	*process
	port int
}

func (f *storefront) addr() string { return "127.0.0.1:" + strconv.Itoa(f.port) }

// startStorefront starts a replica on port (0: a free one), with the compose file's streaming
// holds (one hold serves every buyer nginx sends it).
func startStorefront(t *testing.T, bin, dir string, port int, dbURL, redisURL string) *storefront {
	t.Helper()
	if port == 0 {
		var err error
		port, err = procutil.FreePort()
		require.NoError(t, err)
	}
	f := &storefront{port: port}
	f.process = startProcess(t, dir, io.Discard, bin, "--addr", f.addr(), "--db", dbURL, "--redis", redisURL,
		"--admin-token", adminToken, "--log-level", "warn", "--shutdown-timeout", "5s")
	return f
}

func (f *storefront) waitReady(t *testing.T) {
	t.Helper()
	hc := &http.Client{Timeout: time.Second}
	require.Eventually(t, func() bool {
		select {
		case <-f.done:
			t.Fatalf("storefront on %s exited: %s", f.addr(), f.out)
		default:
		}
		res, err := hc.Get("http://" + f.addr() + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "storefront on %s not ready", f.addr())
}

// kill ends the replica as a crash would (SIGKILL) and waits until it is reaped and its port
// refuses connections.
func (f *storefront) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, f.cmd.Process.Kill())
	<-f.done
	_, err := net.DialTimeout("tcp", f.addr(), time.Second)
	require.Error(t, err, "%s still accepts connections", f.addr())
}

// nginx is Debian's nginx running the repository's configuration.
type nginx struct {
	url string
	hc  *http.Client
	log *accessLog
}

// startNginx writes deploy/nginx.conf into prefix with the storefronts' ports, starts nginx
// there and waits until it answers.
func startNginx(t *testing.T, bin, prefix string, ports []int) *nginx {
	t.Helper()
	require.NoError(t, os.MkdirAll(prefix, 0o700))
	src, err := os.ReadFile("nginx.conf")
	require.NoError(t, err)
	port, err := procutil.FreePort()
	require.NoError(t, err)
	conf := string(src)
	for i, name := range replicas {
		from := name + ":8080"
		require.Equal(t, 2, strings.Count(conf, from), "%s: once in each upstream", from)
		conf = strings.ReplaceAll(conf, from, "127.0.0.1:"+strconv.Itoa(ports[i]))
	}
	require.Equal(t, 1, strings.Count(conf, "listen 80;"))
	conf = strings.Replace(conf, "listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", port), 1)
	// What a packaged nginx would write under /run and /var/lib goes under the prefix.
	var head strings.Builder
	fmt.Fprintf(&head, "daemon off;\nmaster_process on;\npid %s;\nlock_file %s;\n",
		filepath.Join(prefix, "nginx.pid"), filepath.Join(prefix, "nginx.lock"))
	if os.Geteuid() == 0 { // the workers would run as nobody, who cannot enter the test's 0700 directories
		head.WriteString("user root;\n")
	}
	var temps strings.Builder
	for _, kind := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&temps, "  %s_temp_path %s;\n", kind, filepath.Join(prefix, kind))
	}
	require.Equal(t, 1, strings.Count(conf, "\nhttp {\n"))
	conf = head.String() + strings.Replace(conf, "\nhttp {\n", "\nhttp {\n"+temps.String(), 1)
	path := filepath.Join(prefix, "nginx.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))

	out, err := exec.Command(bin, "-t", "-p", prefix, "-c", path, "-e", "stderr").CombinedOutput()
	require.NoError(t, err, "nginx -t: %s\n%s", out, conf)

	n := &nginx{url: fmt.Sprintf("http://127.0.0.1:%d", port), hc: &http.Client{Timeout: 30 * time.Second},
		log: &accessLog{lines: map[string][]string{}}}
	p := startProcess(t, prefix, n.log, bin, "-p", prefix, "-c", path, "-e", "stderr")
	t.Cleanup(n.hc.CloseIdleConnections)
	require.Eventually(t, func() bool {
		select {
		case <-p.done:
			t.Fatalf("nginx exited: %s", p.out)
		default:
		}
		res, err := n.hc.Get(n.url + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "nginx not answering on %s", n.url)
	return n
}

// do sends one request through nginx with a fresh X-Request-ID.
func (n *nginx) do(t *testing.T, method, path, body string, headers ...string) answer {
	t.Helper()
	a, err := n.send(method, path, body, headers...)
	require.NoError(t, err)
	return a
}

// send is do for any goroutine.
func (n *nginx) send(method, path, body string, headers ...string) (answer, error) {
	a := answer{requestID: randomID()}
	req, err := http.NewRequestWithContext(context.Background(), method, n.url+path, strings.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header.Set("X-Request-ID", a.requestID)
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := n.hc.Do(req)
	if err != nil {
		return a, err
	}
	defer res.Body.Close()
	a.status = res.StatusCode
	a.body, err = io.ReadAll(res.Body)
	return a, err
}

// upstreamsOf waits for the access log line of a request and returns its upstream addresses.
func (n *nginx) upstreamsOf(t *testing.T, requestID string) []string {
	t.Helper()
	var ups []string
	require.Eventually(t, func() bool {
		ups = n.log.upstreams(requestID)
		return ups != nil
	}, 5*time.Second, 5*time.Millisecond, "no access log line for request %s", requestID)
	return ups
}

// accessLog reads nginx's access log (the "main" format of nginx.conf, on its stdout).
type accessLog struct {
	mu    sync.Mutex
	part  []byte
	lines map[string][]string // request id -> $upstream_addr, split
}

var accessRE = regexp.MustCompile(`upstream=(.*) upstream_status=.* request_id=(\S+)$`)

func (l *accessLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		if m := accessRE.FindStringSubmatch(string(l.part[:i])); m != nil {
			// $upstream_addr lists the replicas tried, separated by ", ".
			l.lines[m[2]] = strings.Split(m[1], ", ")
		}
		l.part = l.part[i+1:]
	}
	return len(p), nil
}

func (l *accessLog) upstreams(requestID string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines[requestID]
}

var idSeq struct {
	sync.Mutex
	n int
}

func randomID() string {
	idSeq.Lock()
	defer idSeq.Unlock()
	idSeq.n++
	return fmt.Sprintf("nginx-test-%d-%d", os.Getpid(), idSeq.n)
}
