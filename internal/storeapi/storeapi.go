// Package storeapi is a small client of the storefront's HTTP API for the programs that drive
// several storefront instances from outside (the load test, the lab's supervisor and burst
// runner): which strategies an instance offers and how each behaves, which locks an instance
// holds, and which instance holds an item's lock. It imports none of the storefront's packages:
// it knows the API only by its JSON.
package storeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxBody bounds the body read from one answer.
const maxBody = 8 << 20

// Error is a non-2xx answer: its status and the code and message of the API's error body
// ({"error":{"code","message"}}); a body of another shape gives the code "http_<status>".
type Error struct {
	Status  int
	Code    string
	Message string
}

// Error describes the answer in one line.
func (e *Error) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// ErrNotDemo is returned (wrapped) by Locks when the instance answers 404: it does not run in
// demo mode, and shows no locks.
var ErrNotDemo = errors.New("storeapi: not in demo mode (GET /api/debug/locks answered 404)")

// GetJSON sends GET base+path and decodes a 2xx JSON body into out. A non-2xx answer is
// returned as *Error; a transport failure or an undecodable body as the error it is.
func GetJSON(ctx context.Context, hc *http.Client, base, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("GET %s: read the body: %w", path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return DecodeError(resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: decode the body: %w", path, err)
	}
	return nil
}

// DecodeError reads the API's error body of a non-2xx answer of that status (a body of
// another shape: the code "http_<status>" and the body's first 200 bytes as the message).
func DecodeError(status int, body []byte) *Error {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &Error{Status: status, Code: "http_" + strconv.Itoa(status)}
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message = env.Error.Code, env.Error.Message
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	e.Message = msg
	return e
}
