package handlers

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// SupervisorConfig configures NewSupervisor.
type SupervisorConfig struct {
	Supervisor Supervisor
	Lease      time.Duration // the instances' lock lease
	Logger     *slog.Logger  // nil: slog.Default()
}

// NewSupervisor returns the handler of the supervisor process (--demo --instances N): the lab
// page and its API, and each instance's API under /i/<index>/ (a reverse proxy, so the page
// talks to one origin), event streams included.
//
//	GET  /, /static/*               the lab page
//	GET  /api/lab                   the instances, the lease, and that Pause is offered
//	POST /api/lab/run, /api/lab/pause
//	ANY  /i/:index/*path            instance index's API (e.g. /i/0/api/events)
//	GET  /healthz
func NewSupervisor(cfg SupervisorConfig) http.Handler {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &server{demo: true}
	l := &lab{sup: cfg.Supervisor, lease: cfg.Lease, hc: newLabClient()}
	r := s.baseEngine(logger)
	r.GET("/healthz", s.healthz)
	l.routes(r.Group("/api"))
	pageRoutes(r, true)
	r.Any("/i/:index/*path", l.proxy)
	return r
}

// proxy forwards a request under /i/<index>/ to that instance. A proxied event stream
// outlives the supervisor's write timeout too.
func (l *lab) proxy(c *gin.Context) {
	idx, err := strconv.Atoi(c.Param("index"))
	insts := l.sup.Instances()
	if err != nil || idx < 0 || idx >= len(insts) {
		writeError(c, errRouteNotFound)
		return
	}
	target, err := url.Parse(insts[idx].URL)
	if err != nil || insts[idx].URL == "" {
		writeError(c, errRouteNotFound)
		return
	}
	if strings.HasSuffix(c.Param("path"), "/events") {
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Time{})
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = c.Param("path")
			pr.Out.URL.RawPath = ""
		},
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			writeError(c, fmt.Errorf("%w: lab instance %d: %w", inventory.ErrUnavailable, idx, err))
		},
	}
	rp.ServeHTTP(c.Writer, c.Request)
}
