package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/handlers"
)

// Without demo mode, every demo header is refused the same way (400 invalid_request, the
// header named) on every route that sells or sets aside: a purchase, a checkout and a hold
// placement; nothing is sold or held. With the lab left out (-tags nodemo) too: the names
// are the storefront's.
func TestDemoHeadersRefusedOutsideDemo(t *testing.T) {
	e := newEnv(t, envOptions{})
	value := map[string]string{
		handlers.HeaderStrategy:      "guard",
		handlers.HeaderSimulatedWork: "1ms",
		handlers.HeaderFault:         "stall",
		handlers.HeaderBarrier:       "b",
	}
	assert.Len(t, handlers.DemoHeaders(), 4)
	for _, name := range handlers.DemoHeaders() {
		for _, route := range []struct{ path, body string }{
			{"/api/items/1/purchase", `{"quantity":1}`},
			{"/api/checkout", `{"lines":[{"item_id":1,"quantity":1}]}`},
			{"/api/holds", `{"lines":[{"item_id":1,"quantity":1}]}`},
		} {
			a := e.do("POST", route.path, route.body, name+": "+value[name])
			assert.Equal(t, http.StatusBadRequest, a.status, "%s on %s: %s", name, route.path, a.body)
			assert.Equal(t, "invalid_request", a.errorCode(), "%s on %s", name, route.path)
			assert.Contains(t, string(a.body), name+": the demo headers", "%s on %s", name, route.path)
			assert.Contains(t, string(a.body), "only accepted when the server runs with --demo")
		}
	}
	a := e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "X-Fault: crash", "X-Barrier: b")
	assert.Contains(t, string(a.body), "X-Fault, X-Barrier: the demo headers", "every demo header sent is named")
	assert.Contains(t, string(e.do("GET", "/api/items/1", "").body), `"stock":10`, "nothing sold")
	assert.Contains(t, string(e.do("GET", "/api/stats", "").body), `"held_units":0`, "nothing held")
	assert.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`).status, "without them: sold")
}
