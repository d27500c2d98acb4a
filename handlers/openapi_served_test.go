package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/handlers"
)

// TestOpenAPIServedAndChecked: GET /openapi.json answers the embedded document as it is, and
// every test server's answers on the document's routes are checked against it (apiDoc), the
// document's own included; the demo's routes are not.
func TestOpenAPIServedAndChecked(t *testing.T) {
	e := newEnv(t, envOptions{demo: true})
	before := apiDoc.Checked()
	doc := e.do("GET", "/openapi.json", "")
	assert.Equal(t, http.StatusOK, doc.status)
	assert.Equal(t, "application/json; charset=utf-8", doc.header.Get("Content-Type"))
	assert.Equal(t, handlers.OpenAPI(), doc.body)
	assert.Equal(t, http.StatusCreated, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "Idempotency-Key: served-1").status)
	assert.Equal(t, http.StatusOK, e.do("POST", "/api/items/1/purchase", `{"quantity":1}`, "Idempotency-Key: served-1").status)
	assert.Equal(t, http.StatusOK, e.do("GET", "/api/debug/locks", "").status)
	assert.Equal(t, before+3, apiDoc.Checked(), "the document and the two purchases, not the demo's locks")
}
