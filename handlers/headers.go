package handlers

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/stockguard/stockguard/inventory"
)

// The request headers of the HTTP contract (docs/DESIGN.md §10.2), named here so that every
// package that sends or reads them (the lab, the tests) spells them one way.
const (
	// HeaderIdempotencyKey makes a purchase, a checkout or a hold placement safe to send again.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderStrategy names the strategy of a purchase, cart or hold (demo mode).
	HeaderStrategy = "X-Strategy"
	// HeaderSimulatedWork is a purchase's or cart's simulated slow work, a Go duration (demo mode).
	HeaderSimulatedWork = "X-Simulated-Work"
	// HeaderFault asks the lab for a fault (demo mode with the lab: stall, crash, barrier).
	HeaderFault = "X-Fault"
	// HeaderBarrier names the barrier of "X-Fault: barrier" (demo mode with the lab).
	HeaderBarrier = "X-Barrier"
)

// DemoHeaders are the headers only a server that runs with --demo accepts: without it, a
// purchase, checkout or hold placement that sends any of them is 400 invalid_request, whoever
// would act on it (the storefront reads X-Strategy and X-Simulated-Work, the lab X-Fault and
// X-Barrier), so that a header meant for the demo is never silently ignored.
func DemoHeaders() []string {
	return []string{HeaderStrategy, HeaderSimulatedWork, HeaderFault, HeaderBarrier}
}

// refuseDemoHeaders is the error of a request outside demo mode that sends a demo header, nil
// when it sends none.
func refuseDemoHeaders(h http.Header) error {
	var sent []string
	for _, name := range DemoHeaders() {
		if _, ok := h[http.CanonicalHeaderKey(name)]; ok {
			sent = append(sent, name)
		}
	}
	if len(sent) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: the demo headers (%s) are only accepted when the server runs with --demo",
		inventory.ErrInvalid, strings.Join(sent, ", "), strings.Join(DemoHeaders(), ", "))
}
