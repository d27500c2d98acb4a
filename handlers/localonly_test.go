package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
)

// LocalOnly lets the demo's own page and this machine's tools act on a demo on loopback, and
// refuses, 403 forbidden in the one error shape, what another web page could send: another
// site's Origin or Sec-Fetch-Site (a fetch, a form, a "simple" request alike), or a Host that is
// not loopback (DNS rebinding).
func TestLocalOnly(t *testing.T) {
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.POST("/act", handlers.LocalOnly(), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	r.GET("/look", handlers.LocalOnly(), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	for _, tc := range []struct {
		name, method, path, host string
		headers                  map[string]string
		want                     int
	}{
		{"the page itself", "POST", "/act", "127.0.0.1:8080", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}, 204},
		{"a tool (curl)", "POST", "/act", "localhost:8080", map[string]string{"Content-Type": "application/json; charset=utf-8"}, 204},
		{"IPv6 loopback", "POST", "/act", "[::1]:8080", map[string]string{"Content-Type": "application/json"}, 204},
		{"another site's page", "POST", "/act", "127.0.0.1:8080", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"another site, no Sec-Fetch-Site", "POST", "/act", "127.0.0.1:8080", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, 403},
		{"a simple request of another page", "POST", "/act", "127.0.0.1:8080", map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example"}, 403},
		{"a form of another page", "POST", "/act", "127.0.0.1:8080", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}, 403},
		{"a tool, no body", "POST", "/act", "127.0.0.1:8080", nil, 204},
		{"DNS rebinding", "POST", "/act", "attacker.example:8080", map[string]string{"Content-Type": "application/json"}, 403},
		{"DNS rebinding, a read", "GET", "/look", "attacker.example:8080", nil, 403},
		{"a read from the page", "GET", "/look", "127.0.0.1:8080", nil, 204},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}"))
			req.Host = tc.host
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			require.Equal(t, tc.want, w.Code, w.Body.String())
			if tc.want == http.StatusForbidden {
				var body struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
				assert.Equal(t, "forbidden", body.Error.Code)
				assert.NotEmpty(t, body.Error.Message)
			}
		})
	}
}
