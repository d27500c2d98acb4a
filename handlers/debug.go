package handlers

import (
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// DebugSource lists the locks this process holds right now (*inventory.LockSet).
type DebugSource interface {
	HeldLocks() []inventory.HeldLock
}

// debugLocksBody is the answer of GET /api/debug/locks.
type debugLocksBody struct {
	PID   int                  `json:"pid"`
	Locks []inventory.HeldLock `json:"locks"`
}

// debugLocks answers GET /api/debug/locks in demo mode (404 otherwise): the process id and the
// locks it holds, so the load test's chaos mode can find and pause a lock holder.
func (s *server) debugLocks(c *gin.Context) {
	if !s.demo {
		writeError(c, errDebugDisabled)
		return
	}
	locks := []inventory.HeldLock{}
	if s.debug != nil {
		locks = append(locks, s.debug.HeldLocks()...)
	}
	c.JSON(http.StatusOK, debugLocksBody{PID: os.Getpid(), Locks: locks})
}

// servePprof serves net/http/pprof's pages under /debug/pprof/ (demo mode only).
func servePprof(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}
