package scenario

import (
	"io"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/fault"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -lock-replicas: the instances of -chaos failover run with --lock-replicas, with a lease
// that outlives the failover, and lock is then expected SAFE; without it, only the safe
// class is. Other modes refuse it (their Redis has no replica).
func TestFailoverLockReplicasConfig(t *testing.T) {
	c, err := ParseConfig([]string{"-chaos", "failover", "-lock-replicas", "1"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"--lock-replicas", "1"}, fault.ModeFor(c).Args(c))
	assert.Equal(t, 10*time.Second, c.Lease)
	assert.True(t, fault.ModeFor(c).ExpectSafe(fault.ClassLock))
	assert.True(t, fault.ModeFor(c).ExpectSafe(fault.ClassSafe))

	c, err = ParseConfig([]string{"-chaos", "failover", "-lock-replicas", "1", "-lease", "3s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, c.Lease, "a -lease given wins")

	c, err = ParseConfig([]string{"-chaos", "failover"}, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, fault.ModeFor(c).Args(c))
	assert.Equal(t, time.Second, c.Lease)
	assert.False(t, fault.ModeFor(c).ExpectSafe(fault.ClassLock), "without replicas the promoted replica misses the lock")

	var ue *usageError
	_, err = ParseConfig([]string{"-chaos", "pause", "-lock-replicas", "1"}, io.Discard)
	require.ErrorAs(t, err, &ue, "exit code 2")
	assert.Contains(t, err.Error(), "-lock-replicas applies to -chaos failover")
	_, err = ParseConfig([]string{"-chaos", "failover", "-lock-replicas", "2"}, io.Discard)
	require.ErrorAs(t, err, &ue)
}
