package client

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// ErrNotSent marks the error of a request no byte of which was written to any connection: its
// every try failed before (a refused connection: the instance is down, as after a kill -9).
// It reached no server and had no effect. A request whose headers were written once, even if
// the transport then tried it again on a new connection and that dial failed (net/http does so
// for a request with an Idempotency-Key whose reused connection broke), is not marked: it may
// have reached a server that died with it.
var ErrNotSent = errors.New("request not sent")

// do sends req with hc, and wraps the error of a request it wrote no byte of in ErrNotSent.
func do(hc *http.Client, req *http.Request) (*http.Response, error) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { wrote.Store(true) },
		WroteHeaders:     func() { wrote.Store(true) },
	}
	resp, err := hc.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err != nil && !wrote.Load() {
		err = fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return resp, err
}
