package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// strategies answers GET /api/strategies: the strategies this server offers, in the order of
// inventory's strategies table (the built-in rows, then the ones plugged in), with how each
// sells, when it oversells, and whether it takes a per-item Redis lock. No code of this process
// reads it; its readers drive the storefront from outside. The lab page builds its list from
// it (name, safe, default, demo_only). The load test learns from it what to expect of a
// strategy (safe), whether its chaos faults, which hit a lock holder, apply to it (takes_lock),
// and which Redis keys a demo strategy owns (redis_key_prefix). The lab's burst runner reads
// takes_lock (through internal/storeapi) to tell a pause that has no holder to find.
func (s *server) strategies(c *gin.Context) {
	infos := s.svc.DescribeStrategies()
	views := make([]strategyView, len(infos))
	for i, st := range infos {
		views[i] = strategyView{Name: st.Name, Description: st.HowIt, Safety: st.Safety, Safe: st.Safe,
			TakesLock: st.Locks, Default: st.Name == s.defaultStrategy, DemoOnly: st.Demo, RedisKeyPrefix: st.KeyPrefix}
	}
	c.JSON(http.StatusOK, views)
}

// strategyView is a strategy as GET /api/strategies shows it.
type strategyView struct {
	Name           string `json:"name"`
	Description    string `json:"description"` // how it sells
	Safety         string `json:"safety"`
	Safe           bool   `json:"safe"`       // never oversells, even when a lock is lost
	TakesLock      bool   `json:"takes_lock"` // takes a per-item Redis lock (a lock holder's faults apply)
	Default        bool   `json:"default"`
	DemoOnly       bool   `json:"demo_only"`                  // offered only with --demo
	RedisKeyPrefix string `json:"redis_key_prefix,omitempty"` // a demo strategy's own Redis keys
}
