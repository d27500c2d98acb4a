package client

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTimingMS(t *testing.T) {
	h := "work;dur=20.500, lock;dur=3"
	assert.InDelta(t, 20.5, timingMS(h, "work"), 1e-9)
	assert.InDelta(t, 3.0, timingMS(h, "lock"), 1e-9)
	assert.Zero(t, timingMS(h, "db"))
	assert.Zero(t, timingMS("", "work"))
	assert.Zero(t, timingMS("work", "work"), "no dur")
	assert.InDelta(t, 1.25, timingMS(`cache;desc="hit", work;desc="x";dur=1.25`, "work"), 1e-9)
}
