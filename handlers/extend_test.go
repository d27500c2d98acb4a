package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

// An extension adds routes that answer in the storefront's error shape, a page that replaces
// the shop page while the shop's style sheet stays shared, and nothing else changes.
func TestExtendAndPages(t *testing.T) {
	errTeapot := &handlers.Error{Status: http.StatusTeapot, Code: "teapot", Message: "short and stout", RetryAfter: true}
	e := newEnv(t, envOptions{configure: func(c *handlers.Config) {
		c.Extend = func(r *gin.Engine) {
			r.GET("/api/ext/fail", func(c *gin.Context) { handlers.WriteError(c, fmt.Errorf("%w: item 7", errTeapot)) })
			r.GET("/api/ext/invalid", func(c *gin.Context) {
				handlers.WriteError(c, fmt.Errorf("%w: no good", inventory.ErrInvalid))
			})
			r.POST("/api/ext/echo", handlers.LimitBody(16), func(c *gin.Context) {
				var v struct {
					N int `json:"n"`
				}
				if err := handlers.DecodeJSON(c.Request.Body, &v); err != nil {
					handlers.WriteError(c, err)
					return
				}
				c.JSON(http.StatusOK, v)
			})
		}
		c.Pages = &handlers.Pages{FS: fstest.MapFS{
			"ext.html": {Data: []byte("<title>the extension page</title>")},
			"ext.js":   {Data: []byte("// ext")},
		}, Index: "ext.html"}
	}})
	a := e.do("GET", "/api/ext/fail", "")
	assert.Equal(t, http.StatusTeapot, a.status)
	assert.Equal(t, "teapot", a.errorCode())
	assert.Contains(t, string(a.body), "short and stout: item 7")
	assert.Equal(t, "1", a.header.Get("Retry-After"))
	assert.Equal(t, "invalid_request", e.do("GET", "/api/ext/invalid", "").errorCode())
	assert.Equal(t, http.StatusOK, e.do("POST", "/api/ext/echo", `{"n":3}`).status)
	assert.Equal(t, "invalid_request", e.do("POST", "/api/ext/echo", `{"n":3,"m":1}`).errorCode(), "unknown field")
	assert.Equal(t, "payload_too_large", e.do("POST", "/api/ext/echo", `{"n":3000000000000000}`).errorCode())

	page := e.do("GET", "/", "")
	require.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, string(page.body), "the extension page")
	assert.Equal(t, http.StatusOK, e.do("GET", "/static/ext.js", "").status)
	css := e.do("GET", "/static/style.css", "")
	assert.Equal(t, http.StatusOK, css.status, "the shop's style sheet is shared")
	assert.Contains(t, css.header.Get("Content-Type"), "css")
	assert.Equal(t, http.StatusOK, e.do("GET", "/api/items", "").status, "the storefront's routes stay")
}

// Without an extension, / is the shop page, and the lab's routes do not exist.
func TestShopPageAndNoLab(t *testing.T) {
	e := newEnv(t, envOptions{demo: true})
	for _, path := range []string{"/api/events", "/api/lab"} {
		a := e.do("GET", path, "")
		assert.Equal(t, http.StatusNotFound, a.status, path)
		assert.Equal(t, "not_found", a.errorCode(), path)
	}
	page := e.do("GET", "/", "")
	assert.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, string(page.body), "stockguard shop")
	js := e.do("GET", "/static/shop.js", "")
	assert.Equal(t, http.StatusOK, js.status)
	assert.Contains(t, js.header.Get("Content-Type"), "javascript")
	assert.Equal(t, http.StatusNotFound, e.do("GET", "/static/lab.js", "").status, "the lab's page is not the storefront's")
	// A missing file and the directory are the API's JSON 404, not a text page or a listing.
	for _, path := range []string{"/static/lab.js", "/static/nope.css", "/static/", "/static/../static/"} {
		a := e.do("GET", path, "")
		assert.Equal(t, http.StatusNotFound, a.status, path)
		assert.Equal(t, "not_found", a.errorCode(), "%s: %s", path, a.body)
	}
	a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Fault: stall")
	assert.Equal(t, http.StatusCreated, a.status, "in demo mode X-Fault is the extension's to act on; without one it does nothing: %s", a.body)
}

// refuseWrites is an interceptor that counts the writes it is asked about and refuses them.
type refuseWrites struct{ asked *atomic.Int32 }

func (refuseWrites) Locker(_ string, l inventory.Locker) inventory.Locker { return l }

func (r refuseWrites) BeforeWrite(context.Context, int64, string) error {
	r.asked.Add(1)
	return fmt.Errorf("%w: refused before the write", inventory.ErrUnavailable)
}

// Config.Intercept sees each purchase's request: its error is the answer, and the interceptor
// it returns runs in the purchase (here it refuses the write: nothing is sold).
func TestIntercept(t *testing.T) {
	var asked atomic.Int32
	e := newEnv(t, envOptions{configure: func(c *handlers.Config) {
		c.Intercept = func(r *http.Request) (inventory.Interceptor, error) {
			switch r.Header.Get("X-Test") {
			case "":
				return nil, nil
			case "refuse":
				return refuseWrites{&asked}, nil
			}
			return nil, fmt.Errorf("%w: X-Test must be refuse", inventory.ErrInvalid)
		}
	}})
	a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Test: maybe")
	assert.Equal(t, "invalid_request", a.errorCode(), "%s", a.body)
	a = e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Test: refuse")
	assert.Equal(t, http.StatusServiceUnavailable, a.status, "%s", a.body)
	assert.EqualValues(t, 1, asked.Load(), "the interceptor ran before the write")
	var it struct {
		Stock int `json:"stock"`
	}
	decode(t, e.do("GET", "/api/items/1", ""), &it)
	assert.Equal(t, 10, it.Stock, "nothing sold")
	assert.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`).status, "no interceptor: sold")
}
