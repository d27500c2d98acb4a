package scenario

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	deadline := time.Now().Add(30 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ { // spend some CPU
		_ = strings.Repeat("x", n%100)
	}
	cpu, ok := procCPU(os.Getpid())
	require.True(t, ok)
	assert.Positive(t, cpu)
	_, ok = procCPU(-1)
	assert.False(t, ok)
}
