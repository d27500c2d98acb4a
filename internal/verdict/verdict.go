// Package verdict judges a run of purchases against the storefront's invariants: no unit sold
// beyond the stock, stock down by exactly the units sold, one order per answered purchase; and
// a run of carts and stock holds (CheckCarts): every order with all its lines, stock down by
// exactly the units sold and held, no hold confirmed after its expiry, expired holds' units
// sellable again.
// It knows only numbers and answers (plain types below), never the storefront's packages, so
// every client of the storefront (the load test, the lab's burst runner) names a run's outcome
// the same way.
package verdict

import "fmt"

// The verdicts, most severe first: a run shows the most severe one it earns.
const (
	Oversold      = "OVERSOLD"       // units sold beyond the stock, or stock below zero
	LostUpdate    = "LOST UPDATE"    // the stock does not show every unit sold (a write overwrote another)
	Stranded      = "STRANDED STOCK" // units neither sold nor sellable (an expired hold's units not given back)
	OrderMismatch = "ORDER MISMATCH" // answers and order rows disagree (a missing, duplicate or foreign order)
	Blocked       = "BLOCKED"        // a lock nobody could take refused every waiting buyer
	Safe          = "SAFE"           // every invariant held
)

// Item is one item's sales numbers (a row of GET /api/stats).
type Item struct {
	ItemID       int64
	InitialStock int // stock at the catalogue's reset
	Stock        int // stock now
	SoldUnits    int // units of its order rows
	OrderCount   int // its order rows
	HeldUnits    int // units of its active holds: off the stock, not sold
}

// Counts is what a verdict follows from.
type Counts struct {
	Sold        int  // units sold in the run
	Oversold    int  // units sold beyond the stock, plus units below zero stock
	LostUpdates int  // units sold that the stock does not show, or the reverse
	Stranded    int  // units of expired holds that could not be sold again
	Mismatches  int  // answers and order rows that disagree
	Blocked     bool // a lock nobody could take refused every waiting buyer
}

// Verdict names the most severe broken invariant of c (Safe when none).
func (c Counts) Verdict() string {
	switch {
	case c.Oversold > 0:
		return Oversold
	case c.LostUpdates > 0:
		return LostUpdate
	case c.Stranded > 0:
		return Stranded
	case c.Mismatches > 0:
		return OrderMismatch
	case c.Blocked:
		return Blocked
	}
	return Safe
}

// Between returns the counts of a run on one item from its numbers before and after the run:
// the units sold, those sold beyond the stock (or below zero) that the run added, and those
// the stock does not show. Blocked and Mismatches are the caller's to set.
func Between(before, after Item) Counts {
	sold := after.SoldUnits - before.SoldUnits
	return Counts{
		Sold:        sold,
		Oversold:    max(0, overOf(after)-overOf(before)),
		LostUpdates: abs(sold - (before.Stock - after.Stock)),
	}
}

// Fresh returns the numbers of it right after a reset: its initial stock, nothing sold. It is
// the "before" of a run that starts on a freshly reset catalogue.
func Fresh(it Item) Item {
	return Item{ItemID: it.ItemID, InitialStock: it.InitialStock, Stock: it.InitialStock}
}

// overOf is what an item shows of overselling: units sold beyond its initial stock, and units
// below zero stock.
func overOf(it Item) int {
	return max(0, it.SoldUnits-it.InitialStock) + max(0, -it.Stock)
}

// AllRefused reports whether waiting buyers waited and every one was answered code (by the
// answers counted by code): the sign of a lock nobody can take when code is the lock wait's
// timeout. It is false when no buyer waited.
func AllRefused(answers map[string]int, code string, waiting int) bool {
	return waiting > 0 && answers[code] == waiting
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// maxViolations bounds Findings.Violations.
const maxViolations = 20

// violate records one broken invariant in words (the first maxViolations of them).
func (f *Findings) violate(format string, a ...any) {
	if len(f.Violations) < maxViolations {
		f.Violations = append(f.Violations, fmt.Sprintf(format, a...))
	} else if len(f.Violations) == maxViolations {
		f.Violations = append(f.Violations, "(more violations not listed)")
	}
}
