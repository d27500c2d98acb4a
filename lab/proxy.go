//go:build !nodemo

package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

// errNoInstance answers a path under /i/ that names no instance.
var errNoInstance = &handlers.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such lab instance"}

// guardedPath tells whether an instance's path is one the guard stands before: its lab
// routes that act (anything but GET /api/lab) and Go's profiles.
func guardedPath(method, path string) bool {
	return strings.HasPrefix(path, "/debug/pprof") ||
		(strings.HasPrefix(path, "/api/lab") && method != http.MethodGet && method != http.MethodHead)
}

// proxy forwards a request under /i/<index>/ to that instance. A proxied event stream
// outlives the supervisor's write timeout too.
func (l *api) proxy(c *gin.Context) {
	idx, err := strconv.Atoi(c.Param("index"))
	insts := l.sup.Instances()
	if err != nil || idx < 0 || idx >= len(insts) {
		handlers.WriteError(c, errNoInstance)
		return
	}
	if insts[idx].URL == "" { // started again after it exited, not listening yet
		handlers.WriteError(c, &handlers.Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
			Message: fmt.Sprintf("lab instance %d is starting", idx), RetryAfter: true})
		return
	}
	target, err := url.Parse(insts[idx].URL)
	if err != nil {
		handlers.WriteError(c, errNoInstance)
		return
	}
	fwd := path.Clean("/" + c.Param("path")) // the path checked is the path forwarded
	if strings.HasSuffix(c.Param("path"), "/") && fwd != "/" {
		fwd += "/"
	}
	if guardedPath(c.Request.Method, fwd) {
		if l.check()(c); c.IsAborted() {
			return
		}
	}
	if strings.HasSuffix(c.Param("path"), "/events") {
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Time{})
		// The stream ends when the supervisor's run does (shutdown begins), as an instance's
		// own streams do: an open lab page must not hold the shutdown up to its timeout.
		if run := l.sup.running; run != nil {
			ctx, cancel := context.WithCancel(c.Request.Context())
			defer cancel()
			defer context.AfterFunc(run, cancel)()
			c.Request = c.Request.WithContext(ctx)
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = fwd
			pr.Out.URL.RawPath = ""
		},
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			handlers.WriteError(c, fmt.Errorf("%w: lab instance %d: %w", inventory.ErrUnavailable, idx, err))
		},
	}
	rp.ServeHTTP(c.Writer, c.Request)
}
