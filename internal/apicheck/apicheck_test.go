package apicheck_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/apicheck"
)

// document is the storefront's document (handlers/openapi.json), read as a file: an
// internal/ package imports no package of the storefront.
func document(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../handlers/openapi.json")
	require.NoError(t, err)
	return b
}

// answer is a canned answer of a fake server.
type answer struct {
	status int
	header map[string]string
	body   string
}

// exchange sends method path body through a Checker's Transport to a server that answers a,
// and returns the round trip's error (the violation, if any).
func exchange(t *testing.T, c *apicheck.Checker, method, path, body string, a answer, headers ...string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Request-ID", "0123456789abcdef01234567")
		for k, v := range a.header {
			if v == "" {
				w.Header().Del(k)
				continue
			}
			w.Header().Set(k, v)
		}
		if a.body != "" {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := (&http.Client{Transport: c.Transport(nil)}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Equal(t, a.body, string(got), "the answer is handed on whole")
	return nil
}

const receipt = `{"order_id":7,"item_id":1,"quantity":2,"remaining":8,"fence_token":3,"strategy":"lock+guard"}`

// TestCheckerRules: each rule of the package comment refuses what it should, and a true
// exchange passes.
func TestCheckerRules(t *testing.T) {
	c, err := apicheck.New(document(t))
	require.NoError(t, err)
	purchase := func(body string, a answer, headers ...string) error {
		return exchange(t, c, "POST", "/api/items/1/purchase", body, a, headers...)
	}
	soldOut := `{"error":{"code":"sold_out","message":"item 1 is sold out"}}`
	for _, tc := range []struct {
		name  string
		err   error
		wants string // "" for no violation
	}{
		{"a true sale", purchase(`{"quantity":2}`, answer{201, nil, receipt}), ""},
		{"a true replay, with its key", purchase(`{"quantity":2}`, answer{200, nil, receipt}, "Idempotency-Key: k-1"), ""},
		{"a true refusal", purchase(`{"quantity":2}`, answer{409, nil, soldOut}), ""},
		{"a bad request refused", purchase(`{"quantity":0}`, answer{400, nil, `{"error":{"code":"invalid_request","message":"quantity"}}`}), ""},
		{"demo timing", purchase(`{"quantity":2}`, answer{201, map[string]string{"Server-Timing": "work;dur=1.000, lock;dur=0.250"}, receipt}), ""},
		{"undocumented status", purchase(`{"quantity":2}`, answer{418, nil, soldOut}), "status is not supported"},
		{"undocumented field", purchase(`{"quantity":2}`, answer{201, nil, strings.Replace(receipt, `"strategy"`, `"shard":1,"strategy"`, 1)}), `"shard" is unsupported`},
		{"missing field", purchase(`{"quantity":2}`, answer{201, nil, strings.Replace(receipt, `"fence_token":3,`, "", 1)}), "fence_token"},
		{"a code of another status", purchase(`{"quantity":2}`, answer{409, nil, `{"error":{"code":"hold_not_active","message":"x"}}`}), "hold_not_active"},
		{"an unknown code", purchase(`{"quantity":2}`, answer{409, nil, `{"error":{"code":"teapot","message":"x"}}`}), "teapot"},
		{"no request id", purchase(`{"quantity":2}`, answer{201, map[string]string{"X-Request-ID": ""}, receipt}), "X-Request-ID"},
		{"a 429 without Retry-After", purchase(`{"quantity":2}`, answer{429, nil, `{"error":{"code":"overloaded","message":"x"}}`}), "Retry-After"},
		{"a malformed Server-Timing", purchase(`{"quantity":2}`, answer{201, map[string]string{"Server-Timing": "work=1"}, receipt}), "Server-Timing"},
		{"a sale of a request the document refuses", purchase(`{"quantity":2,"coupon":"x"}`, answer{201, nil, receipt}), "accepted a request the document refuses"},
		{"a sale under a bad key", purchase(`{"quantity":2}`, answer{201, nil, receipt}, "Idempotency-Key: "+strings.Repeat("k", 129)), "accepted a request the document refuses"},
		{"a reset without the token", exchange(t, c, "POST", "/api/admin/reset", `{"items":[]}`, answer{200, nil, `[]`}), "accepted a request the document refuses"},
		{"a cart's short lines", exchange(t, c, "POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":2}]}`,
			answer{409, nil, `{"error":{"code":"insufficient_stock","message":"x","lines":[{"item_id":1,"requested":2,"available":1}]}}`}), ""},
		{"a cart's refusal without its lines", exchange(t, c, "POST", "/api/checkout", `{"lines":[{"item_id":1,"quantity":2}]}`,
			answer{409, nil, `{"error":{"code":"insufficient_stock","message":"x"}}`}), "lines"},
		{"a cancel", exchange(t, c, "DELETE", "/api/holds/3", "", answer{204, nil, ""}), ""},
		{"not in the document: passes", exchange(t, c, "GET", "/api/lab", "", answer{200, nil, `{"anything":1}`}), ""},
		{"a wrong method: passes", exchange(t, c, "PUT", "/api/items", "", answer{405, nil, `{"error":{"code":"method_not_allowed","message":"x"}}`}), ""},
		{"a trailing slash: passes", exchange(t, c, "GET", "/api/items/", "", answer{404, nil, `{"error":{"code":"not_found","message":"x"}}`}), ""},
	} {
		if tc.wants == "" {
			assert.NoError(t, tc.err, tc.name)
			continue
		}
		if assert.Error(t, tc.err, tc.name) {
			assert.Contains(t, tc.err.Error(), tc.wants, tc.name)
		}
	}
	assert.Len(t, c.Violations(), 12, "every violation recorded")
}

// TestHandlerReportsToTheTest: the server-side hook fails the test it was given, and hands the
// answer on as it was.
func TestHandlerReportsToTheTest(t *testing.T) {
	c, err := apicheck.New(document(t))
	require.NoError(t, err)
	rec := &recordingTB{TB: t}
	h := apicheck.Handler(rec, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-ID", "r-1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `[{"id":1,"sku":"A","name":"a","stock":-1,"price_cents":0}]`)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/api/items", nil))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "r-1", w.Header().Get("X-Request-ID"))
	assert.Contains(t, w.Body.String(), `"stock":-1`)
	require.Len(t, rec.errors, 1, "a negative stock is refused by the schema")
	assert.Contains(t, rec.errors[0], "stock")
}

// recordingTB keeps the errors reported to it instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Error(args ...any) {
	for _, a := range args {
		if err, ok := a.(error); ok {
			r.errors = append(r.errors, err.Error())
		}
	}
}
