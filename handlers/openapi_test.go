package handlers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/inventory"
)

// The OpenAPI document (openapi.json) is the one description of the API; these tests hold
// this package to it from the inside: its Go types, its routes and its error table. The
// answers themselves are checked against it by every test server of handlers_test (newEnv,
// internal/apicheck).

// loadOpenAPI loads and validates the embedded document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	require.Equal(t, "3.0.3", doc.OpenAPI)
	return doc
}

// TestOpenAPITypes: every schema of an answer (or of the admin reset's body) has exactly the
// fields of the Go type this package encodes (or decodes) it with, of the same JSON types; an
// answer's required fields are exactly the ones the type always sends (no omitempty).
func TestOpenAPITypes(t *testing.T) {
	doc := loadOpenAPI(t)
	answers := map[string]reflect.Type{
		"Item":        reflect.TypeFor[ItemView](),
		"Receipt":     reflect.TypeFor[inventory.Receipt](),
		"CartReceipt": reflect.TypeFor[inventory.CartReceipt](),
		"Hold":        reflect.TypeFor[inventory.StockHold](),
		"Order":       reflect.TypeFor[orderView](),
		"ItemStats":   reflect.TypeFor[inventory.ItemStats](),
		"Strategy":    reflect.TypeFor[strategyView](),
		"LineReceipt": reflect.TypeFor[inventory.LineReceipt](),
		"ShortLine":   reflect.TypeFor[inventory.ShortLine](),
		"Error":       reflect.TypeFor[errorBody](),
	}
	bodies := map[string]reflect.Type{
		"ResetRequest": reflect.TypeFor[resetRequest](),
		"NewItem":      reflect.TypeFor[inventory.NewItem](),
	}
	for name, typ := range answers {
		s := doc.Components.Schemas[name]
		require.NotNil(t, s, "schema %s", name)
		for _, msg := range matchType(typ, s.Value, name, true) {
			t.Error(msg)
		}
	}
	for name, typ := range bodies {
		s := doc.Components.Schemas[name]
		require.NotNil(t, s, "schema %s", name)
		for _, msg := range matchType(typ, s.Value, name, false) {
			t.Error(msg)
		}
	}
	errs := map[string]bool{} // the schemas of the error answers: errorBody, or a cart's
	for name, r := range doc.Components.Responses {
		mt := r.Value.Content.Get("application/json")
		if mt == nil || mt.Schema.Value.Properties["error"] == nil {
			continue
		}
		typ := reflect.TypeFor[errorBody]()
		if name == "CartConflict" {
			typ = reflect.TypeFor[cartErrorBody]()
		}
		errs[strings.TrimPrefix(mt.Schema.Ref, "#/components/schemas/")] = true
		for _, msg := range matchType(typ, mt.Schema.Value, "responses/"+name, true) {
			t.Error(msg)
		}
	}
	// Every schema is held to a type, or is a request body the handlers parse by hand
	// (decodeObject: the tests of bad input and the answers' checks hold them), or the codes.
	byHand := []string{"PurchaseRequest", "CheckoutRequest", "HoldRequest", "CartLine", "ErrorCode"}
	for name := range doc.Components.Schemas {
		_, a := answers[name]
		_, b := bodies[name]
		assert.True(t, a || b || errs[name] || slices.Contains(byHand, name), "schema %s is held to no Go type", name)
	}
}

// matchType compares a Go type's JSON encoding with a schema; required: compare the
// required fields too (an answer's). It returns what differs, each prefixed with at.
func matchType(typ reflect.Type, s *openapi3.Schema, at string, required bool) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, at+": "+fmt.Sprintf(format, args...)) }
	if typ.Kind() == reflect.Pointer {
		if !s.Nullable {
			bad("Go %s may be null, the schema is not nullable", typ)
		}
		typ = typ.Elem()
	} else if s.Nullable {
		bad("the schema is nullable, Go %s is never null", typ)
	}
	is := func(want string) bool {
		if !s.Type.Is(want) {
			bad("Go %s is a JSON %s, the schema says %v", typ, want, s.Type.Slice())
			return false
		}
		return true
	}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		if is("string") && s.Format != "date-time" {
			bad("a time is format date-time, not %q", s.Format)
		}
	case typ.Kind() == reflect.Struct:
		if !is("object") {
			return out
		}
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			bad("the schema allows fields it does not name (additionalProperties: false)")
		}
		fields := map[string]reflect.StructField{}
		var always []string
		for _, f := range reflect.VisibleFields(typ) {
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if !f.IsExported() || name == "-" || f.Anonymous {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fields[name] = f
			if !strings.Contains(opts, "omitempty") {
				always = append(always, name)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(fields)) {
			p := s.Properties[name]
			if p == nil {
				bad("Go field %s (%q) is not in the schema", fields[name].Name, name)
				continue
			}
			out = append(out, matchType(fields[name].Type, p.Value, at+"."+name, required)...)
		}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			if _, ok := fields[name]; !ok {
				bad("schema property %q is no field of Go %s", name, typ)
			}
		}
		if required {
			slices.Sort(always)
			if want := slices.Sorted(slices.Values(s.Required)); !slices.Equal(always, want) {
				bad("required %v, but Go %s always sends %v", want, typ, always)
			}
		}
	case typ.Kind() == reflect.Slice:
		if is("array") {
			out = append(out, matchType(typ.Elem(), s.Items.Value, at+"[]", required)...)
		}
	case typ.Kind() == reflect.String:
		is("string")
	case typ.Kind() == reflect.Bool:
		is("boolean")
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64:
		if is("integer") && (typ.Kind() == reflect.Int64) != (s.Format == "int64") {
			bad("Go %s with format %q (int64 is format int64, no other)", typ, s.Format)
		}
	default:
		bad("no rule for Go %s", typ)
	}
	return out
}

// docCodes returns the codes of the ErrorCode schema, and per response status the codes the
// document lets an error answer of that status carry (over every operation).
func docCodes(t *testing.T, doc *openapi3.T) (all []string, byStatus map[int][]string) {
	t.Helper()
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		all = append(all, v.(string))
	}
	byStatus = map[int][]string{}
	for _, path := range doc.Paths.InMatchingOrder() {
		for _, op := range doc.Paths.Value(path).Operations() {
			for status, r := range op.Responses.Map() {
				mt := r.Value.Content.Get("application/json")
				if mt == nil {
					continue
				}
				errProp := mt.Schema.Value.Properties["error"]
				if errProp == nil {
					continue
				}
				n, err := strconv.Atoi(status)
				require.NoError(t, err)
				for _, v := range errProp.Value.Properties["code"].Value.Enum {
					if !slices.Contains(byStatus[n], v.(string)) {
						byStatus[n] = append(byStatus[n], v.(string))
					}
				}
			}
		}
	}
	return all, byStatus
}

// outsideDocument are the codes only routes outside the document answer: forbidden, of the
// demo's routes that act (LocalOnly: the lab, the profiles).
var outsideDocument = []string{"forbidden"}

// TestOpenAPIErrorCodes: the document's codes are exactly the error table's (internal
// included; the codes of routes outside the document excepted), and every response lets an
// error answer carry a code only with the status the table gives that code.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	all, byStatus := docCodes(t, doc)
	status := map[string]int{internalError.code: internalError.status}
	for _, e := range errorTable {
		status[e.api.code] = e.api.status
	}
	var table []string
	for code := range status {
		if !slices.Contains(outsideDocument, code) {
			table = append(table, code)
		}
	}
	assert.ElementsMatch(t, table, all, "ErrorCode of openapi.json and the codes of errorTable")
	var answered []string
	for n, codes := range byStatus {
		for _, code := range codes {
			answered = append(answered, code)
			assert.Equal(t, status[code], n, "a %d answer of the document carries %s", n, code)
		}
	}
	slices.Sort(answered)
	answered = slices.Compact(answered)
	// method_not_allowed answers a method no operation has: it is in ErrorCode, in no operation.
	assert.ElementsMatch(t, slices.DeleteFunc(slices.Clone(all), func(c string) bool { return c == "method_not_allowed" }), answered,
		"every code of ErrorCode is one some operation may answer")
}

// undocumentedRoutes are the /api/ routes New serves that the document leaves out, and why.
var undocumentedRoutes = map[string]string{
	"GET /api/debug/locks": "--demo only (404 without it): the demo's view of the locks held",
}

// TestOpenAPIRoutes: the document's operations are exactly the /api/ routes (and
// /openapi.json) that New serves, undocumentedRoutes apart.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	s := &server{offered: map[string]bool{}, bound: purchaseBound(0), defaultStrategy: inventory.StrategyGuard}
	var served []string
	for _, r := range s.engine(slog.New(slog.NewTextHandler(io.Discard, nil))).Routes() {
		route := r.Method + " " + param.ReplaceAllString(r.Path, "{$1}")
		if (strings.HasPrefix(r.Path, "/api/") || r.Path == "/openapi.json") && undocumentedRoutes[route] == "" {
			served = append(served, route)
		}
	}
	assert.ElementsMatch(t, served, documented)
}

// TestAPIPage: docs/api.md, the page for people, links to the document, and its table and
// its list of errors name the document's routes and codes: every route of the table that
// the document leaves out, and every code, says why.
func TestAPIPage(t *testing.T) {
	doc := loadOpenAPI(t)
	page, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	text := string(page)
	assert.True(t, strings.Contains(text, "(../handlers/openapi.json)"), "docs/api.md links to the document")

	// The table's rows: | `METHOD /path...`, `/other`... | success | notes |.
	var rows []string
	routeRE := regexp.MustCompile("`((?:GET|POST|DELETE|PUT|ANY) )?(/[^`? ]*)[^`]*`")
	_, table, _ := strings.Cut(text, "## Routes")
	table, _, _ = strings.Cut(table, "\n## ")
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		method := ""
		for _, m := range routeRE.FindAllStringSubmatch(first, -1) {
			if m[1] != "" {
				method = strings.TrimSpace(m[1])
			}
			rows = append(rows, method+" "+param.ReplaceAllString(m[2], "{$1}"))
		}
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
			assert.Contains(t, rows, method+" "+path, "docs/api.md's table has the document's route")
		}
	}
	for _, row := range rows {
		if slices.Contains(documented, row) {
			continue
		}
		_, path, _ := strings.Cut(row, " ")
		assert.True(t, pageOnly(path), "docs/api.md's route %q is neither in the document nor one it leaves out (pageOnly)", row)
	}

	// The codes of the section Errors: `code` followed by its status.
	_, errs, _ := strings.Cut(text, "## Errors")
	errs, _, _ = strings.Cut(errs, "\n## ")
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(errs, -1) {
		listed = append(listed, m[1])
	}
	all, _ := docCodes(t, doc)
	for _, code := range all {
		assert.Contains(t, listed, code, "docs/api.md lists the document's code")
	}
	for _, code := range listed {
		assert.True(t, slices.Contains(all, code) || slices.Contains(outsideDocument, code) || labCodes[code],
			"docs/api.md's code %q is neither in the document nor one of the routes it leaves out", code)
	}
}

// param is a Gin or docs path parameter (":id").
var param = regexp.MustCompile(`:(\w+)`)

// labCodes are the codes only the lab's routes answer (package lab), outside the document.
var labCodes = map[string]bool{"not_held": true, "pause_unsupported": true}

// pageOnly reports whether a path of docs/api.md is one the document leaves out: the demo's
// routes (the lab's, the event stream, the locks held, the profiles), the pages, the
// probes and the metrics.
func pageOnly(path string) bool {
	for _, p := range []string{"/api/lab", "/api/events", "/api/debug/", "/debug/pprof", "/static/", "/healthz", "/readyz", "/metrics"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return path == "/"
}
