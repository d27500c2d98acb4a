package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// strategies answers GET /api/strategies: the strategies this server offers, in the order of
// inventory's strategies table, with how each sells and when it oversells. The lab builds its
// list from it; the load test learns its expectations from it (safe), and which Redis keys a
// demo strategy owns (redis_key_prefix).
func (s *server) strategies(c *gin.Context) {
	infos := s.svc.DescribeStrategies()
	views := make([]strategyView, len(infos))
	for i, st := range infos {
		views[i] = strategyView{Name: st.Name, Description: st.HowIt, Safety: st.Safety, Safe: st.Safe,
			Default: st.Name == s.defaultStrategy, DemoOnly: st.Demo, RedisKeyPrefix: st.KeyPrefix}
	}
	c.JSON(http.StatusOK, views)
}

// strategyView is a strategy as GET /api/strategies shows it.
type strategyView struct {
	Name           string `json:"name"`
	Description    string `json:"description"` // how it sells
	Safety         string `json:"safety"`
	Safe           bool   `json:"safe"` // never oversells, even when a lock is lost
	Default        bool   `json:"default"`
	DemoOnly       bool   `json:"demo_only"`                  // offered only with --demo
	RedisKeyPrefix string `json:"redis_key_prefix,omitempty"` // a demo strategy's own Redis keys
}
