package linearize

import (
	"fmt"
	"net/http"
)

// Op is one operation a client asks of the storefront: a Purchase or a Read. The set is
// closed (an unexported method): an operation is only useful here with its rule in the model.
// An operation on several items at once would name each of them and be checked, item by item,
// through its effect on that item.
type Op interface {
	// ItemID returns the item the operation is about.
	ItemID() int64
	describe(out Outcome) string
}

// Purchase is POST /api/items/:id/purchase: Quantity units of Item, under the
// Idempotency-Key Key ("" when the request carries none). Attempts that share a key (a
// retry, a replay after a timeout) are one purchase: the server writes at most one order for
// a key, and Check treats them so.
type Purchase struct {
	Item     int64
	Quantity int
	Key      string
}

// ItemID returns the item bought.
func (p Purchase) ItemID() int64 { return p.Item }

func (p Purchase) describe(out Outcome) string {
	return fmt.Sprintf("buy %d → %s", p.Quantity, describeOutcome(out))
}

// Read is GET /api/items/:id: the item's stock as the server reports it. Its answer is a
// Stock outcome.
type Read struct {
	Item int64
}

// ItemID returns the item read.
func (r Read) ItemID() int64 { return r.Item }

func (r Read) describe(out Outcome) string {
	return "read → " + describeOutcome(out)
}

// Outcome is what a client learned from one operation: Sold, SoldOut, Insufficient, Refused
// or Indeterminate for a Purchase; Stock or Indeterminate for a Read. What each one promises
// about the item's stock is the package documentation's table.
type Outcome interface {
	outcome()
}

// Sold is a 201 (or a 200 idempotent replay) answer to a purchase: the order exists, and
// Remaining is the item's stock right after its write (the receipt's "remaining").
type Sold struct {
	Remaining int
}

// SoldOut is a 409 sold_out answer: the purchase wrote nothing, and at some instant while it
// was in flight the item had no unit left.
type SoldOut struct{}

// Insufficient is a 409 insufficient_stock answer: the purchase wrote nothing, and at some
// instant while it was in flight the item had fewer units than asked.
type Insufficient struct{}

// Refused is an error answer that promises that nothing was written and says nothing about
// the stock: a lock not obtained or lost before the write, an overloaded server, a request
// the server rejected. Code is the error code, for the reader.
type Refused struct {
	Code string
}

// Indeterminate is an operation whose outcome the client does not know: no answer (a
// timeout, a broken connection) or an error after which the write may have committed (500,
// 503 unavailable). A purchase may have taken effect at any time after it was sent, or
// never. Cause says why, for the reader.
type Indeterminate struct {
	Cause string
}

// Stock is the answer to a Read: the item's stock.
type Stock struct {
	Units int
}

func (Sold) outcome()          {}
func (SoldOut) outcome()       {}
func (Insufficient) outcome()  {}
func (Refused) outcome()       {}
func (Indeterminate) outcome() {}
func (Stock) outcome()         {}

func describeOutcome(out Outcome) string {
	switch o := out.(type) {
	case Sold:
		return fmt.Sprintf("sold, %d left", o.Remaining)
	case SoldOut:
		return "sold out"
	case Insufficient:
		return "insufficient stock"
	case Refused:
		return "refused (" + o.Code + ")"
	case Indeterminate:
		return "? (" + o.Cause + ")"
	case Stock:
		return fmt.Sprintf("%d in stock", o.Units)
	}
	return fmt.Sprintf("%v", out)
}

// PurchaseOutcome maps the answer to one purchase attempt to its Outcome: status is the HTTP
// status (0 when no answer came: cause then says why, "timeout" or "transport"), code the
// error code of a non-2xx answer, remaining the receipt's remaining stock of a 2xx answer.
//
// It is the one place that decides what an answer promises: 2xx is Sold (Indeterminate when
// code is not empty: a receipt that could not be read, "bad_body"); 409 sold_out and
// insufficient_stock are SoldOut and Insufficient; 429 overloaded, the 503s answered before
// any write (RefusedBeforeWrite) and every other 4xx are Refused; anything else (no answer,
// 500, 503 unavailable, an unknown 5xx) is Indeterminate.
func PurchaseOutcome(status int, code string, remaining int) Outcome {
	switch {
	case status >= 200 && status < 300 && code == "":
		return Sold{Remaining: remaining}
	case status >= 200 && status < 300: // sold, but the receipt could not be read
		return Indeterminate{Cause: fmt.Sprintf("%d %s", status, code)}
	case status == http.StatusConflict && code == "sold_out":
		return SoldOut{}
	case status == http.StatusConflict && code == "insufficient_stock":
		return Insufficient{}
	case RefusedBeforeWrite(status, code):
		return Refused{Code: code}
	case status >= 400 && status < 500:
		return Refused{Code: code}
	case status == 0:
		return Indeterminate{Cause: code}
	}
	return Indeterminate{Cause: fmt.Sprintf("%d %s", status, code)}
}

// refusedBeforeWrite are the codes of the 503s a storefront answers before any write
// (docs/DESIGN.md §11): at_capacity (too many in flight, answered before the body is read),
// lock_timeout, lock_lost (the fenced write was refused, or the lock was gone before it) and
// lock_not_replicated (the lock was given back before any write).
var refusedBeforeWrite = map[string]bool{"at_capacity": true, "lock_timeout": true, "lock_lost": true, "lock_not_replicated": true}

// RefusedBeforeWrite reports whether an answer promises that nothing was written: a 503 with
// one of the codes answered before any write. The load test's checks read a purchase's other
// 5xx answers as of unknown outcome (its commit may have landed).
func RefusedBeforeWrite(status int, code string) bool {
	return status == http.StatusServiceUnavailable && refusedBeforeWrite[code]
}
