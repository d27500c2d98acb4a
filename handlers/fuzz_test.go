package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzPurchaseBody sends arbitrary bodies to POST /api/items/2/purchase (an item with plenty
// of stock) and checks that no body produces a 500 or a panic, that every answer is JSON, and
// that only a well-formed quantity sells. Its seed corpus runs with every `go test`.
func FuzzPurchaseBody(f *testing.F) {
	for _, seed := range []string{
		`{"quantity":1}`, `{"quantity":1000}`, `{"quantity":1001}`, `{"quantity":0}`,
		`{"quantity":-1}`, `{"quantity":1.5}`, `{"quantity":1e3}`, `{"quantity":"3"}`,
		`{"quantity":null}`, `{"quantity":[1]}`, `{"quantity":{}}`, `{}`, `[]`, `null`, ``, ` `,
		`{"quantity":1}{}`, `{"quantity":1} `, `{"quantity":1,"quantity":2}`, `{"Quantity":1}`,
		`{"quantity":1,"x":1}`, `{"quantity":99999999999999999999999}`, `{"quantity":01}`,
		`{"quantity":-0}`, `{"quantity":1E0}`, "\xff\xfe", `{"quantity":"\u0000"}`,
		`{"quantity":1` + strings.Repeat(" ", 9000) + `}`, strings.Repeat("[", 5000),
		`{"quantity":2}` + "\n",
	} {
		f.Add(seed)
	}
	e := newEnv(f, envOptions{demo: true})
	h := e.srv.Config.Handler

	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/api/items/2/purchase", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		switch rec.Code {
		case http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("body %q: status %d, answer %s", body, rec.Code, rec.Body)
		}
		var answer map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatalf("body %q: answer is not JSON: %s", body, rec.Body)
		}
		if rec.Code != http.StatusCreated {
			return
		}
		// Only a body whose quantity is a JSON integer 1..1000 may sell, that many units.
		var parsed struct{ Quantity json.Number }
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&parsed); err != nil {
			t.Fatalf("body %q sold but does not parse: %v", body, err)
		}
		if strings.ContainsAny(string(parsed.Quantity), ".eE-+") {
			t.Fatalf("body %q sold with a non-integer quantity", body)
		}
		n, err := parsed.Quantity.Int64()
		if err != nil || n < 1 || n > 1000 || float64(n) != answer["quantity"] {
			t.Fatalf("body %q sold %v units", body, answer["quantity"])
		}
	})
}
