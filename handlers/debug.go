package handlers

import (
	"net/http"
	"os"

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
