//go:build !nodemo

package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
)

// readyTimeout bounds each instance's answer to the supervisor's /readyz: a SIGSTOPped
// instance does not answer at all.
const readyTimeout = 2 * time.Second

// readyClient asks the instances' /readyz; the request's context bounds it.
var readyClient = &http.Client{}

// instanceReady is one instance's answer to its /readyz.
type instanceReady struct {
	Index  int    `json:"index"`
	PID    int    `json:"pid"`
	Ready  bool   `json:"ready"`
	Detail string `json:"detail,omitempty"` // why not: its status, or the error of the request
}

// readyz answers GET /readyz of the supervisor: it asks every instance's own /readyz at once,
// and answers 200 {"status":"ok","instances":[...]} when each answered 200, else 503 in the
// one error shape, naming the instances that were not ready and why.
func (s *Supervisor) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	insts := s.Instances()
	out := make([]instanceReady, len(insts))
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Go(func() { out[i] = s.instanceReady(ctx, in) })
	}
	wg.Wait()
	var bad []string
	for _, r := range out {
		if !r.Ready {
			bad = append(bad, fmt.Sprintf("instance %d (pid %d): %s", r.Index, r.PID, r.Detail))
		}
	}
	if len(bad) > 0 || len(out) == 0 {
		msg := "no lab instance is running"
		if len(bad) > 0 {
			msg = "lab instance not ready: " + strings.Join(bad, "; ")
		}
		handlers.WriteError(c, &handlers.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: msg, RetryAfter: true})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok", "instances": out})
}

// instanceReady asks one instance's /readyz.
func (s *Supervisor) instanceReady(ctx context.Context, in Instance) instanceReady {
	r := instanceReady{Index: in.Index, PID: in.PID}
	if in.URL == "" {
		r.Detail = "starting (started again after it exited)"
		return r
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL+"/readyz", nil)
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	resp, err := readyClient.Do(req) // bounded by ctx
	if err != nil {
		r.Detail = "no answer: " + err.Error()
		if ctx.Err() != nil {
			r.Detail = fmt.Sprintf("no answer within %s (stopped or overloaded)", readyTimeout)
		}
		return r
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	r.Ready = resp.StatusCode == http.StatusOK
	if !r.Ready {
		r.Detail = "its /readyz answered " + resp.Status
	}
	return r
}
