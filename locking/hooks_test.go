package locking

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// JoinHooks calls every non-nil hook of each Hooks in order, with the same arguments, and
// leaves a hook nil when no Hooks sets it.
func TestJoinHooks(t *testing.T) {
	var calls []string
	rec := func(name string) Hooks {
		return Hooks{
			Acquired: func(k string, tok int64, d time.Duration) {
				calls = append(calls, name+":acquired:"+k)
				assert.Equal(t, int64(7), tok)
				assert.Equal(t, time.Second, d)
			},
			Renewed: func(k string) { calls = append(calls, name+":renewed:"+k) },
			Lost: func(k string, err error) {
				calls = append(calls, name+":lost:"+k)
				assert.ErrorIs(t, err, ErrLost)
			},
			Released: func(k string, d time.Duration) {
				calls = append(calls, name+":released:"+k)
				assert.Equal(t, 2*time.Second, d)
			},
		}
	}
	onlyRenewed := Hooks{Renewed: func(k string) { calls = append(calls, "b:renewed:"+k) }}
	j := JoinHooks(rec("a"), Hooks{}, onlyRenewed, rec("c"))
	j.Acquired("k", 7, time.Second)
	j.Renewed("k")
	j.Lost("k", ErrLost)
	j.Released("k", 2*time.Second)
	assert.Equal(t, []string{
		"a:acquired:k", "c:acquired:k",
		"a:renewed:k", "b:renewed:k", "c:renewed:k",
		"a:lost:k", "c:lost:k",
		"a:released:k", "c:released:k",
	}, calls)

	none := JoinHooks(Hooks{}, onlyRenewed)
	assert.Nil(t, none.Acquired)
	assert.Nil(t, none.Lost)
	assert.Nil(t, none.Released)
	assert.NotNil(t, none.Renewed)
	assert.Equal(t, Hooks{}, JoinHooks())
}

// Joined hooks given to a Client fire for a real lock: both sides see the acquisition with
// the lock's token, and the release.
func TestJoinHooksOnClient(t *testing.T) {
	var tokens [2]int64
	var released [2]int
	side := func(i int) Hooks {
		return Hooks{
			Acquired: func(_ string, tok int64, _ time.Duration) { tokens[i] = tok },
			Released: func(string, time.Duration) { released[i]++ },
		}
	}
	c := New(newRedis(t, nil), &Options{Hooks: JoinHooks(side(0), side(1))})
	defer c.Close()
	ctx := context.Background()
	l, err := c.Obtain(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	assert.Positive(t, l.Token())
	assert.Equal(t, [2]int64{l.Token(), l.Token()}, tokens)
	assert.Equal(t, [2]int{1, 1}, released)
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
}
