// Package netfault puts a TCP proxy with injectable network faults between a client and a
// server on loopback: Shopify's toxiproxy (github.com/Shopify/toxiproxy/v2) used as a library,
// in this process, without its HTTP API. A Link forwards every connection to its upstream;
// Blackhole drops every byte both ways while keeping the connections open (a partition: the
// client's calls time out, nothing is refused), Latency delays every byte, Heal removes the
// faults. The load test's -chaos partition and latency runs and the tests use it.
package netfault

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Link is one proxy: clients dial Addr, the proxy dials the upstream.
type Link struct {
	Addr     string // host:port clients connect to
	Upstream string

	mu     sync.Mutex
	proxy  *toxiproxy.Proxy
	toxics []string // names of the active toxics
	closed bool
}

var (
	serverOnce sync.Once
	server     *toxiproxy.ApiServer
)

// apiServer is the toxiproxy server object the proxies hang off (its logger and metrics); its
// HTTP API is never started.
func apiServer() *toxiproxy.ApiServer {
	serverOnce.Do(func() {
		server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	})
	return server
}

var seq struct {
	sync.Mutex
	n int
}

// NewLink starts a proxy on a free loopback port that forwards to upstream (host:port).
func NewLink(upstream string) (*Link, error) {
	seq.Lock()
	seq.n++
	name := fmt.Sprintf("link-%d", seq.n)
	seq.Unlock()
	p := toxiproxy.NewProxy(apiServer(), name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("netfault: start proxy to %s: %w", upstream, err)
	}
	return &Link{Addr: p.Listen, Upstream: upstream, proxy: p}, nil
}

// Blackhole drops everything both ways from now on, on open and new connections, until Heal:
// toxiproxy's timeout toxic with timeout 0 ("data is dropped until the toxic is removed").
func (l *Link) Blackhole() error {
	return l.add("blackhole", "timeout", map[string]any{"timeout": 0})
}

// Latency delays every chunk by d in each direction (toxiproxy's latency toxic, upstream and
// downstream), on open and new connections, until Heal.
func (l *Link) Latency(d time.Duration) error {
	return l.add("latency", "latency", map[string]any{"latency": d.Milliseconds()})
}

// add adds toxic kind under name in both directions.
func (l *Link) add(name, kind string, attrs map[string]any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("netfault: link to %s is closed", l.Upstream)
	}
	for _, stream := range []string{"upstream", "downstream"} {
		var a []string
		for k, v := range attrs {
			a = append(a, fmt.Sprintf("%q:%v", k, v))
		}
		js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`,
			name+"_"+stream, kind, stream, strings.Join(a, ","))
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			return fmt.Errorf("netfault: %s on %s: %w", kind, l.Upstream, err)
		}
		l.toxics = append(l.toxics, name+"_"+stream)
	}
	return nil
}

// Heal removes every fault: the held bytes of a blackhole are dropped, traffic flows again.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, name := range l.toxics {
		if err := l.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil && first == nil {
			first = fmt.Errorf("netfault: heal %s: %w", l.Upstream, err)
		}
	}
	l.toxics = nil
	return first
}

// Close stops the proxy and closes its connections.
func (l *Link) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.proxy.Stop()
	}
}
