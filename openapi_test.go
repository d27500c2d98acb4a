package main

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/apicheck"
)

// apiDoc checks every answer this package's tests receive through http.DefaultTransport (the
// clients of call, http.Get, the lab's proxy and burst runner in this process) on a route of
// the OpenAPI document against it: a violation is the request's error where the test sent
// it, and TestMain fails the run when any was found (a test may ignore a request's error).
var apiDoc = func() *apicheck.Checker {
	c, err := apicheck.New(handlers.OpenAPI())
	if err != nil {
		panic(err)
	}
	return c
}()

func init() {
	http.DefaultTransport = apiDoc.Transport(http.DefaultTransport)
}

// TestOpenAPIServed: the command serves the document at /openapi.json, byte for byte the
// one the checks use, and the answers of this package's requests are checked against it.
func TestOpenAPIServed(t *testing.T) {
	s := startServer(t, nil, baseArgs(t)...)
	before := apiDoc.Checked()
	res, err := http.Get(s.url + "/openapi.json")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "application/json; charset=utf-8", res.Header.Get("Content-Type"))
	assert.Equal(t, handlers.OpenAPI(), body)
	var items []item
	require.Equal(t, http.StatusOK, s.call("GET", "/api/items", "", &items))
	require.NotEmpty(t, items)
	require.Equal(t, http.StatusCreated, s.call("POST", "/api/items/1/purchase", `{"quantity":1}`, nil))
	assert.Equal(t, before+3, apiDoc.Checked(), "the document, the catalogue and the purchase were checked")
}
