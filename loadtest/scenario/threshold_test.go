package scenario

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfigThresholds(t *testing.T) {
	cfg, err := ParseConfig([]string{"-threshold", "p99<200ms,errors<1%", "-threshold", "rps>10"}, nil)
	require.NoError(t, err)
	require.Len(t, cfg.Thresholds, 3)
	assert.Equal(t, "rps", cfg.Thresholds[2].Metric)
	_, err = ParseConfig([]string{"-threshold", "p99<soon"}, nil)
	var ue *usageError
	assert.ErrorAs(t, err, &ue)
	_, err = ParseConfig([]string{"-spike"}, nil)
	assert.ErrorAs(t, err, &ue, "-spike needs -rate")
}
