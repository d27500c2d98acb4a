package handlers

import (
	_ "embed" // openapi.json
	"net/http"

	"github.com/gin-gonic/gin"
)

// openAPIDocument is the OpenAPI 3.0.3 document of the public /api/ routes (openapi.json),
// served as it is at GET /openapi.json. It is the one description of the API: the tests check
// the types this package answers with against its schemas, the routes New serves against its
// paths, the error table against its codes, and every answer the handlers' and the command's
// tests receive against it (internal/apicheck); docs/api.md is its page for people.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI document of the public API (a copy: the caller may change it).
func OpenAPI() []byte {
	return append([]byte(nil), openAPIDocument...)
}

// serveOpenAPI answers GET /openapi.json with the document.
func serveOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json; charset=utf-8", openAPIDocument)
}
