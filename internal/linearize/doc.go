// Package linearize records a history of storefront operations and checks it for
// linearizability with Porcupine (github.com/anishathalye/porcupine): whether the answers
// every client got can be explained by some single order of the operations, each taking
// effect at one instant between its request and its answer, on a stock counter with a
// conditional decrement. It is the load test's proof that no strategy oversold and that no
// answer lied, stronger than counting units after the run.
//
// A Recorder collects the history: Begin before a request, End with the Outcome after its
// answer (or Unknown when no answer came). Check partitions the history by item and checks
// each item's on its own, within a time bound: Ok, Illegal or Unknown (undecided in time).
// On Illegal it writes Porcupine's visualization of the item's history.
//
// # The model
//
// The state of an item is its stock, an integer, initially Options.Stock[item]. Each
// operation takes effect at one instant of its window [request sent, answer received]:
//
//	operation        outcome         legal at stock s          stock after
//	buy q            Sold{r}         s >= q and r == s-q       s-q
//	buy q            SoldOut         s <= 0                    s
//	buy q            Insufficient    s < q                     s
//	buy q            Refused         always                    s
//	buy q            Indeterminate   always                    s-q if s >= q, else s
//	read             Stock{n}        n == s                    s
//
// Sold promises the write happened, atomically, with the stock it reports. SoldOut and
// Insufficient promise that nothing was written and that at some instant while the request
// was in flight the item had no unit left (sold out) or fewer than asked (insufficient): the
// server may decide from a read made before its write, under a lock or not, as long as that
// read is made after the request arrived, since the instant of the read is then in the
// window. A refusal decided from stock that was not yet (or never) written (a batch that
// counts its own members' units before committing them, and answers before it commits) is
// a false promise, which the checker reports when the history shows it: a read that still
// sees the units after the refusal was answered, or a batch that never commits. Refused promises only that nothing was written; Check leaves refused
// purchases out (they constrain nothing). Indeterminate promises nothing: the purchase took
// effect at some instant after its request (a conditional decrement, so it could not
// oversell), possibly after the client stopped waiting, or never; it is checked as an
// operation that returns after every other one, so "never" is the order where it comes
// last. A read without answer is left out.
//
// Linearizability checking is NP-complete in general; what keeps this one short is that the
// stock never goes up. The model refuses the steps that can only lead to orders that fail
// later (a sale that leaves a stock some read has yet to see), tries interchangeable
// operations in one order only (purchases of unknown outcome and equal quantity, reads of
// one value: in the order they were sent), and a sold-out or insufficient refusal, true
// once it is true, is checked at its answer (and drawn there in the visualization). None of
// this changes a verdict: a test checks the model against the bare table on random
// histories. See landmarks, state and canonicalize in the source.
//
// # Idempotency keys
//
// The server writes at most one order per Idempotency-Key. Attempts of one purchase sharing
// a key (sent twice at once, or replayed after a timeout) are checked as one operation: its
// window runs from the first attempt that was sold or unknown to the first receipt, and its
// outcome is that receipt (or Indeterminate when no attempt was sold). Attempts told
// different receipts make the item Illegal outright. Attempts of the key answered sold out
// or insufficient stay operations of their own: they wrote nothing.
package linearize
