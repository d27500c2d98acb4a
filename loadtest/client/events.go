package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/storeapi"
)

// LabEvent is one event of a --demo storefront's GET /api/events (docs/DESIGN.md §5.5): what
// happened to an item lock or a purchase in that process, stamped with its clock (T, Unix ms).
type LabEvent struct {
	Seq     int64   `json:"seq"`
	T       float64 `json:"t"`
	PID     int     `json:"pid"`
	Kind    string  `json:"kind"` // hello, acquire, renew, release, lost, order, fence_refused, wait, ...
	Item    int64   `json:"item,omitempty"`
	Lock    string  `json:"lock,omitempty"` // a pitfall lock's strategy; "": the item's real lock
	Token   int64   `json:"token,omitempty"`
	Seen    int64   `json:"seen,omitempty"` // fence_refused: the token the database had seen
	LeaseMS float64 `json:"lease_ms,omitempty"`
	OrderID int64   `json:"order_id,omitempty"`
	Message string  `json:"message,omitempty"`
	Missed  int64   `json:"missed,omitempty"` // events the stream missed before this one
}

// NewStreamClient returns an HTTP client for event streams: no bound on the whole exchange (a
// stream lasts as long as its context), the dial and the headers bounded.
func NewStreamClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		ResponseHeaderTimeout: 2 * time.Second,
		DisableCompression:    true,
	}}
}

// StreamEvents reads base's GET /api/events, calling fn with each event in the order they come
// (a "hello" first), until ctx ends (nil) or the stream does (its error). hc must not bound the
// whole exchange (NewStreamClient).
func StreamEvents(ctx context.Context, hc *http.Client, base string, fn func(LabEvent)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b [4096]byte
		n, _ := resp.Body.Read(b[:])
		return storeapi.DecodeError(resp.StatusCode, b[:n])
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // the blank line between events, a ": ping" comment
		}
		var ev LabEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("GET %s/api/events: a bad event %q: %w", base, data, err)
		}
		fn(ev)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("GET %s/api/events: the stream ended", base)
}
