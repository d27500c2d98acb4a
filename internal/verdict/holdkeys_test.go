package verdict

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// holdKeyRun is cartRun's with its two holds placed under keys: hold 5 by a retry pair (201,
// then 200 with the same hold), hold 6 by an answer lost then replayed (200), and one
// placement refused for want of stock; the servers keep holds 5 and 6.
func holdKeyRun() CartRun {
	r := cartRun()
	r.HoldKeys = []HoldKey{
		{Key: "h1", Answers: []HoldAnswer{{Status: 201, HoldID: 5}, {Status: 200, HoldID: 5}}},
		{Key: "h2", Answers: []HoldAnswer{{Status: 0}, {Status: 200, HoldID: 6}}},
		{Key: "h3", Answers: []HoldAnswer{{Status: 409}}},
	}
	r.ServerHolds = &ServerHolds{IDs: []int64{5, 6}, Complete: true}
	return r
}

func TestCheckHoldKeysSafe(t *testing.T) {
	f := CheckCarts(holdKeyRun())
	assert.Equal(t, Safe, f.Verdict(), "%v", f.Violations)
	assert.Zero(t, f.DoubleHolds)
	assert.Equal(t, 2, f.HoldKeys)
	assert.Equal(t, 2, f.ServerHolds)
}

// TestCheckHoldKeysDoubleHeld: every way a server that held twice under one key shows.
func TestCheckHoldKeysDoubleHeld(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*CartRun)
		double int
	}{
		"two holds answered under one key": {func(r *CartRun) {
			r.HoldKeys[0].Answers[1].HoldID = 7
			r.HoldKeys[0].Answers[1].Status = 201
			r.ServerHolds.IDs = append(r.ServerHolds.IDs, 7)
		}, 1},
		"a lost answer's hold beside its replay's": {func(r *CartRun) {
			r.ServerHolds.IDs = append(r.ServerHolds.IDs, 4) // the lost attempt's hold, which no answer named
		}, 1},
		"lost answers: more unnamed holds than unanswered keys": {func(r *CartRun) {
			r.HoldKeys = append(r.HoldKeys, HoldKey{Key: "h4", Answers: []HoldAnswer{{Status: 0}, {Status: 503}}, Unknown: true})
			r.ServerHolds.IDs = append(r.ServerHolds.IDs, 8, 9)
		}, 1},
		// h4's answer was lost, its replay after the run refused (short): the key holds
		// nothing, so the unnamed hold is another key's second one (h1's copy, whose answer
		// was lost).
		"a lost answer whose replay was refused owns no hold": {func(r *CartRun) {
			r.HoldKeys = append(r.HoldKeys, HoldKey{Key: "h4", Answers: []HoldAnswer{{Status: 0}, {Status: 409}}})
			r.ServerHolds.IDs = append(r.ServerHolds.IDs, 8)
		}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			r := holdKeyRun()
			tc.change(&r)
			f := CheckCarts(r)
			assert.Equal(t, tc.double, f.DoubleHolds, "%v", f.Violations)
			assert.Equal(t, OrderMismatch, f.Verdict())
			assert.NotEmpty(t, f.Violations)
		})
	}
}

// TestCheckHoldKeysBounds: an unanswered key may own one unnamed hold; a hold answered but
// missing on the servers is a mismatch; uncounted servers check only the answers.
func TestCheckHoldKeysBounds(t *testing.T) {
	r := holdKeyRun()
	r.HoldKeys = append(r.HoldKeys, HoldKey{Key: "h4", Answers: []HoldAnswer{{Status: 0}, {Status: 0}}, Unknown: true})
	r.ServerHolds.IDs = append(r.ServerHolds.IDs, 8)
	f := CheckCarts(r)
	assert.Equal(t, Safe, f.Verdict(), "the lost placement's own hold: %v", f.Violations)

	r = holdKeyRun()
	r.ServerHolds.IDs = []int64{5}
	f = CheckCarts(r)
	assert.Equal(t, 1, f.HoldMismatch)
	assert.Equal(t, OrderMismatch, f.Verdict())

	r = holdKeyRun()
	r.ServerHolds = nil
	f = CheckCarts(r)
	assert.Equal(t, Safe, f.Verdict())
	assert.Zero(t, f.ServerHolds)
	r.HoldKeys[1].Answers[1].HoldID = 9
	f = CheckCarts(r)
	assert.Zero(t, f.DoubleHolds, "one id per key still")
	r.HoldKeys[1].Answers = append(r.HoldKeys[1].Answers, HoldAnswer{Status: 200, HoldID: 6})
	f = CheckCarts(r)
	assert.Equal(t, 1, f.DoubleHolds)
}
