// Package apicheck checks HTTP exchanges against an OpenAPI document, for tests: the
// storefront's tests hook it in at one place (the test server's handler, or the client's
// transport) so that every answer they receive on a documented route is validated against
// handlers.OpenAPI, with kin-openapi's openapi3filter.
//
// The rules of one exchange whose method and path the document describes:
//
//   - the answer must be one the document gives that operation: a documented status, the
//     documented headers (X-Request-ID on every one, Retry-After on a 429), a body of the
//     documented schema, which names every field (additionalProperties: false) and, for an
//     error, the codes that status may carry;
//   - a request answered with success (2xx) must be one the document accepts: the server
//     takes nothing the document refuses. A request the document refuses may be answered
//     with any documented error: that is how the tests of bad input run.
//
// Exchanges on paths or methods the document does not describe (the lab's routes, /metrics,
// the event stream, unknown routes, wrong methods) pass unchecked.
//
// The body of a request is read as JSON whatever its Content-Type says, as the storefront
// reads it.
package apicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// maxCapture bounds the bytes of a request or answer body kept for the check (the largest
// body the storefront reads is the admin reset's 1 MiB).
const maxCapture = 4 << 20

// Checker checks exchanges against one document. It is safe for concurrent use.
type Checker struct {
	doc    *openapi3.T
	router routers.Router

	mu         sync.Mutex
	checked    int
	violations []string
}

// New loads and validates the document and returns its Checker; an error names what is
// wrong with the document.
func New(document []byte) (*Checker, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("apicheck: loading the document: %w", err)
	}
	router, err := legacy.NewRouter(doc) // validates the document
	if err != nil {
		return nil, fmt.Errorf("apicheck: %w", err)
	}
	return &Checker{doc: doc, router: router}, nil
}

// Document returns the loaded document.
func (c *Checker) Document() *openapi3.T { return c.doc }

// Exchange is one request and its answer, the bodies read.
type Exchange struct {
	Request     *http.Request // its Body is not read; RequestBody is
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

// Documented reports whether the document describes the request's method and path.
func (c *Checker) Documented(r *http.Request) bool {
	_, _, ok := c.route(r)
	return ok
}

// route finds the operation of r. A path with a trailing slash ("/api/items/"), which the
// router would take for the path without it, is no route of the storefront's (404
// not_found, no trailing-slash redirect), nor of the document's; nor is a path whose
// parameter is empty.
func (c *Checker) route(r *http.Request) (*routers.Route, map[string]string, bool) {
	route, params, err := c.router.FindRoute(r)
	if err != nil || strings.HasSuffix(r.URL.Path, "/") != strings.HasSuffix(route.Path, "/") {
		return nil, nil, false
	}
	for _, v := range params {
		if v == "" {
			return nil, nil, false
		}
	}
	return route, params, true
}

// Check checks one exchange by the rules of the package comment; it returns nil for an
// exchange the document does not describe, and records (Violations) every error it returns.
func (c *Checker) Check(x Exchange) error {
	route, params, ok := c.route(x.Request)
	if !ok {
		return nil
	}
	req := x.Request.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	req.ContentLength = int64(len(x.RequestBody))
	if len(x.RequestBody) > 0 {
		req.Header.Set("Content-Type", "application/json") // read as JSON whatever it says
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: bearerPresent}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	ctx := context.Background()
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	respErr := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		Body:                   io.NopCloser(bytes.NewReader(x.Body)),
		Options:                opts,
	})
	what := fmt.Sprintf("%s %s answered %d %s", x.Request.Method, x.Request.URL.RequestURI(), x.Status, clip(x.Body))
	var problems []string
	if respErr != nil {
		problems = append(problems, fmt.Sprintf("the answer is not one the document gives: %v", respErr))
	}
	if reqErr != nil && x.Status >= 200 && x.Status < 300 {
		problems = append(problems, fmt.Sprintf("the server accepted a request the document refuses (body %s): %v", clip(x.RequestBody), reqErr))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	if len(problems) == 0 {
		return nil
	}
	v := "openapi: " + what + ": " + strings.Join(problems, "; ")
	c.violations = append(c.violations, v)
	return errors.New(v)
}

// Checked returns how many exchanges were checked (those the document describes).
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

// Violations returns every violation found so far.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// bearerPresent is the document's admin security scheme as a request can be checked without
// the server's token: an Authorization header "Bearer <something>". The server decides
// whether it is the right token (401 otherwise, which the document allows).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	token, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return errors.New("no Authorization: Bearer <admin token>")
	}
	return nil
}

// clip shortens a body for a message.
func clip(b []byte) string {
	const n = 300
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// Handler returns h with every exchange it serves on a documented route checked: a violation
// fails tb (tb.Errorf, with the exchange). The answer of a documented route is buffered and
// checked before the client sees it, so the failure is reported while the test runs; an
// httptest.Server closed in tb's cleanup waits for the handlers, and so for their checks.
func Handler(tb testing.TB, c *Checker, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.Documented(r) {
			h.ServeHTTP(w, r)
			return
		}
		body := &capped{}
		if r.Body != nil {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(r.Body, body), r.Body}
		}
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if err := c.Check(Exchange{Request: r, RequestBody: body.Bytes(), Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}); err != nil {
			tb.Error(err)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// recorder buffers an answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// Flush does nothing: the answer is written whole once checked.
func (r *recorder) Flush() {}

// capped keeps the first maxCapture bytes written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxCapture - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Transport returns a RoundTripper that sends through next (http.DefaultTransport when nil)
// and checks every exchange on a documented route: a violation is recorded (Violations) and
// returned as the round trip's error, so the request fails where the test made it. The
// answer's body is read whole for the check and handed on unread.
func (c *Checker) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{c: c, next: next}
}

type transport struct {
	c    *Checker
	next http.RoundTripper
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !t.c.Documented(r) {
		return t.next.RoundTrip(r)
	}
	var reqBody []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	res, err := t.next.RoundTrip(r)
	if err != nil {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err := t.c.Check(Exchange{Request: r, RequestBody: reqBody, Status: res.StatusCode, Header: res.Header, Body: body}); err != nil {
		return nil, err
	}
	return res, nil
}
