package workload

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/loadtest/client"
)

// A purchase whose connection was refused (the instance is down) had no effect: the history
// records it as refused, not as an operation of unknown outcome; a connection that broke once
// made (the server died with the request) stays unknown.
func TestRefusedConnectionHadNoEffect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	a := &client.API{Base: "http://" + addr, HC: client.NewHTTPClient(1, time.Second)}
	r := a.Purchase(context.Background(), client.PurchaseReq{ItemID: 1, Quantity: 1, Key: "k"})
	require.Equal(t, 0, r.Status)
	unknown := linearize.PurchaseOutcome(r.Status, r.Code, 0)
	assert.Equal(t, linearize.Refused{Code: "not sent: connection refused"}, outcomeOf(r.Err, unknown))

	broken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer broken.Close()
	go func() { // owner: the test; ends when the listener closes
		for {
			c, err := broken.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096)) // the request reached it
			_ = c.Close()                     // and the server died with it
		}
	}()
	b := &client.API{Base: "http://" + broken.Addr().String(), HC: &http.Client{Timeout: time.Second}}
	r = b.Purchase(context.Background(), client.PurchaseReq{ItemID: 1, Quantity: 1, Key: "k"})
	require.Equal(t, 0, r.Status)
	assert.IsType(t, linearize.Indeterminate{}, outcomeOf(r.Err, linearize.PurchaseOutcome(r.Status, r.Code, 0)))
}
