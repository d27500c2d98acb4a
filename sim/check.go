package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/linearize"
	"github.com/stockguard/stockguard/internal/verdict"
)

// Violation is one check a run failed: which, and what it saw.
type Violation struct {
	Check  string // "setup", "verdict", "linearizable", "liveness"
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// historyTimeout bounds Porcupine's search for one item. It runs after the bubble, where its
// timeout can fire.
const historyTimeout = 10 * time.Second

// Check judges one run with the project's own rules: internal/verdict's cart and hold checks
// (stock conserved with holds, carts all or nothing, answers that agree with the database,
// the fence's order), internal/linearize's history check of the items no hold touches, and
// the liveness probes. It returns the violations and the verdict's findings.
func Check(out Outcome) ([]Violation, verdict.Findings) {
	if out.SetupErr != nil {
		return []Violation{{"setup", out.SetupErr.Error()}}, verdict.Findings{}
	}
	var vs []Violation
	f := verdict.CheckCarts(out.Run)
	for _, v := range f.Violations {
		vs = append(vs, Violation{"verdict", v})
	}
	if verdictName := f.Verdict(); verdictName != verdict.Safe && len(f.Violations) == 0 {
		vs = append(vs, Violation{"verdict", verdictName})
	}
	res, err := linearize.Check(context.Background(), out.History, linearize.Options{Stock: out.Stock, Timeout: historyTimeout})
	if err != nil {
		vs = append(vs, Violation{"linearizable", err.Error()})
	}
	for _, r := range res {
		if r.Result != linearize.Ok {
			vs = append(vs, Violation{"linearizable", fmt.Sprintf("item %d: %s: %s", r.Item, r.Result, r.Reason)})
		}
	}
	for _, s := range out.Stuck {
		vs = append(vs, Violation{"liveness", s})
	}
	return vs, f
}
