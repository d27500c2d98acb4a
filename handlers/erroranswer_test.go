package handlers_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

// ErrorAnswer is the API's own mapping (the simulator reads answers through it): a wrapped
// sentinel answers as the sentinel, an unknown error is 500 internal.
func TestErrorAnswer(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("item 1: %w", inventory.ErrSoldOut), 409, "sold_out"},
		{&inventory.ShortLinesError{}, 409, "insufficient_stock"},
		{fmt.Errorf("x: %w", inventory.ErrLockLost), 503, "lock_lost"},
		{inventory.ErrUnavailable, 503, "unavailable"},
		{inventory.ErrHoldExpired, 410, "hold_expired"},
		{errors.New("a driver's error"), 500, "internal"},
	} {
		status, code := handlers.ErrorAnswer(c.err)
		assert.Equal(t, c.status, status, "%v", c.err)
		assert.Equal(t, c.code, code, "%v", c.err)
	}
}
